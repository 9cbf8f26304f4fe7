"""The outbox on real PostgreSQL: fan-out per device, claims with SKIP LOCKED and leases,
retries with backoff, dead rows with their error, and two dispatchers on one database."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from maxclaw.db.database import Database, connect
from maxclaw.push import store
from maxclaw.push.adapters.base import Delivery, DeliveryError
from maxclaw.push.adapters.http import HttpSender
from maxclaw.push.adapters.webhook import WebhookAdapter
from maxclaw.push.dispatcher import Dispatcher
from maxclaw.push.outbox import enqueue_notification, enqueue_withdraw
from maxclaw.push.payload import build_payload, withdraw_payload
from maxclaw.push.rows import ClaimedRow
from tests.cards import CHOICE as CHOICE_QUESTION
from tests.cards import new_thread, post_card
from tests.conftest import Harness
from tests.integration.push_fakes import Endpoint, ManualClock, insert_decision

CHOICE = [{"id": "keep", "label": "Keep", "recommended": True},
          {"id": "drop", "label": "Drop", "recommended": False}]


class ScriptedAdapter:
    """A platform that fails the first ``fail`` sends (or all of them), then accepts."""

    platform = "webhook"

    def __init__(self, fail: int = 0, retryable: bool = True) -> None:
        self.fail = fail
        self.retryable = retryable
        self.calls: list[Delivery] = []

    async def send(self, delivery: Delivery) -> None:
        self.calls.append(delivery)
        if len(self.calls) <= self.fail:
            raise DeliveryError(f"HTTP 503 on call {len(self.calls)}", retryable=self.retryable)

    async def close(self) -> None:
        return None


async def add_device(conn: Any, user_id: str, platform: str = "webhook",
                     url: str = "http://127.0.0.1:9/hook") -> int:
    return int(await conn.fetchval(
        "INSERT INTO push_devices (user_id, platform, config, secret) VALUES ($1, $2, $3, $4)"
        " RETURNING id", user_id, platform, {"url": url, "address": url}, "s" * 16))


async def setup_decision(h: Harness, name: str = "max", devices: int = 1,
                         component_id: str = "call_1:q1",
                         **fields: Any) -> tuple[str, dict[str, Any]]:
    actor = await h.actor(name)
    async with h.services.db.transaction() as conn:
        for i in range(devices):
            await add_device(conn, actor.user_id, url=f"http://127.0.0.1:9/{i}")
        decision = await insert_decision(conn, actor.user_id, actor.main_thread_id,
                                         component_id, options=CHOICE, allow_text=True, **fields)
    return actor.user_id, decision


def dispatcher(h: Harness, adapter: Any, clock: ManualClock | None = None,
               **settings: Any) -> Dispatcher:
    s = h.services.settings.model_copy(update=settings)
    return Dispatcher(h.services.db, {"webhook": adapter}, settings=s, metrics=h.services.metrics,
                      clock=clock, listen=False)


async def claimed_notification(h: Harness,
                               **setup: Any) -> tuple[str, dict[str, Any], ClaimedRow]:
    """A decision's notification queued for its devices (``setup_decision``), and one of them
    claimed by a dispatcher: in flight."""
    user_id, decision = await setup_decision(h, **setup)
    async with h.services.db.transaction() as conn:
        await enqueue_notification(conn, user_id=user_id, decision=decision, thread_title="t")
    async with h.services.db.connection() as conn:
        [held] = await store.claim_due(conn, now=datetime.now(UTC), limit=1, lease_s=60)
    return user_id, decision, held


async def rows(h: Harness) -> list[dict[str, Any]]:
    async with h.services.db.connection() as conn:
        return [dict(r) for r in await conn.fetch("SELECT * FROM push_outbox ORDER BY id")]


async def test_one_row_per_device_and_none_without_devices(harness: Harness) -> None:
    user_id, decision = await setup_decision(harness, devices=3)
    lonely = await harness.actor("eve")
    async with harness.services.db.transaction() as conn:
        assert await enqueue_notification(conn, user_id=user_id, decision=decision,
                                          thread_title="Main") == 3
        other = await insert_decision(conn, lonely.user_id, lonely.main_thread_id, "call_9:q1")
        assert await enqueue_notification(conn, user_id=lonely.user_id, decision=other,
                                          thread_title="Main") == 0
        assert await enqueue_withdraw(conn, user_id=lonely.user_id, decision=other) == 0
    queued = await rows(harness)
    assert len(queued) == 3
    assert {r["device_id"] for r in queued} == set(range(queued[0]["device_id"],
                                                         queued[0]["device_id"] + 3))
    for r in queued:
        assert r["payload"] == build_payload(decision, "Main")
        assert (r["kind"], r["status"], r["attempts"]) == ("notify", "pending", 0)
        assert r["collapse_id"] == "ask:call_1:q1"
        assert r["decision_id"] == decision["id"]
        assert str(r["user_id"]) == user_id


async def test_enqueue_sends_a_listen_hint_on_commit(harness: Harness) -> None:
    user_id, decision = await setup_decision(harness)
    listener = await connect(harness.services.db.url)
    heard = asyncio.Event()
    await listener.add_listener("maxclaw_push", lambda *_: heard.set())
    try:
        async with harness.services.db.transaction() as conn:
            await enqueue_notification(conn, user_id=user_id, decision=decision,
                                       thread_title="t")
        await asyncio.wait_for(heard.wait(), 10)
    finally:
        await listener.close()


async def test_withdraw_cancels_an_unsent_notify_and_follows_one_in_flight(
        harness: Harness) -> None:
    user_id, decision, in_flight = await claimed_notification(harness, devices=2)
    async with harness.services.db.connection() as conn:
        async with conn.transaction():
            # only the device whose notification is in flight may show it: one withdraw
            assert await enqueue_withdraw(conn, user_id=user_id, decision=decision) == 1
        by_id = {r["id"]: r for r in await rows(harness)}
        notify_rows = [r for r in by_id.values() if r["kind"] == "notify"]
        pending = next(r for r in notify_rows if r["id"] != in_flight.id)
        assert pending["status"] == "dead"
        assert "superseded" in pending["last_error"]
        assert by_id[in_flight.id]["status"] == "sending"
        [withdraw] = [r for r in by_id.values() if r["kind"] == "withdraw"]
        assert withdraw["device_id"] == in_flight.device_id
        assert withdraw["payload"] == withdraw_payload(decision)
        # the withdraw waits for the notification in flight on its device
        now = datetime.now(UTC) + timedelta(seconds=1)  # the withdraw was queued after `now`
        assert await store.claim_due(conn, now=now, limit=10, lease_s=60) == []
        assert await store.mark_sent(conn, user_id=user_id, outbox_id=in_flight.id,
                                     attempt=1, now=now)
        [after] = await store.claim_due(conn, now=now, limit=10, lease_s=60)
        assert after.device_id == in_flight.device_id
        assert after.kind == "withdraw"


async def test_a_withdraw_goes_only_where_the_latest_notify_may_show(harness: Harness) -> None:
    """Per device, by its latest notification of the decision: sent, or pending a retry after
    an attempt -> withdraw; never attempted -> cancelled, no withdraw; dead -> no withdraw; a
    device registered after the notification -> nothing."""
    user_id, decision = await setup_decision(harness, devices=4)
    async with harness.services.db.transaction() as conn:
        await enqueue_notification(conn, user_id=user_id, decision=decision, thread_title="t")
        late = await add_device(conn, user_id, url="http://127.0.0.1:9/late")
    ids = sorted(r["id"] for r in await rows(harness))
    sent, retrying, unsent, dead = ids
    async with harness.services.db.connection() as conn:
        await conn.execute("UPDATE push_outbox SET status = 'sent', attempts = 1 WHERE id = $1",
                           sent)
        await conn.execute("UPDATE push_outbox SET attempts = 1, last_error = 'HTTP 503'"
                           " WHERE id = $1", retrying)
        await conn.execute("UPDATE push_outbox SET status = 'dead', attempts = 8 WHERE id = $1",
                           dead)
        async with conn.transaction():
            assert await enqueue_withdraw(conn, user_id=user_id, decision=decision) == 2
    by_id = {r["id"]: r for r in await rows(harness)}
    withdrawn = {r["device_id"] for r in by_id.values() if r["kind"] == "withdraw"}
    assert withdrawn == {by_id[sent]["device_id"], by_id[retrying]["device_id"]}
    assert late not in withdrawn
    assert by_id[unsent]["status"] == by_id[retrying]["status"] == "dead"
    # a reopened decision's new notification, settled before it was sent: nothing to withdraw
    # (the first round's withdraw already went out)
    async with harness.services.db.transaction() as conn:
        await conn.execute("UPDATE push_outbox SET status = 'sent' WHERE kind = 'withdraw'")
        assert await enqueue_notification(conn, user_id=user_id, decision=decision,
                                          thread_title="t") == 5
        assert await enqueue_withdraw(conn, user_id=user_id, decision=decision) == 0


async def test_a_shown_notify_replaced_by_an_unsent_one_still_gets_its_withdraw(
        harness: Harness) -> None:
    """A decision's notification was sent; a newer one of the same decision (it replaces the
    first on the device) is still unsent when the decision settles. The newer one is cancelled
    and the first, still showing, gets its withdraw — through the decisions' path
    (``push.store.WITHDRAW``) and through a card answer (``components.store.ANSWER_SETTLE``).
    (The rule looked at the newest notification alone, found it unsent and withdrew nothing:
    tests/reliability/test_db_faults.py, "last row is notify for a settled decision".)"""
    user_id, decision = await setup_decision(harness, devices=1)
    async with harness.services.db.transaction() as conn:
        await enqueue_notification(conn, user_id=user_id, decision=decision, thread_title="t")
        await conn.execute("UPDATE push_outbox SET status = 'sent', attempts = 1,"
                           " sent_at = now() WHERE decision_id = $1", decision["id"])
        await enqueue_notification(conn, user_id=user_id, decision=decision, thread_title="t")
        assert await enqueue_withdraw(conn, user_id=user_id, decision=decision) == 1
    assert [(r["kind"], r["status"]) for r in await rows(harness)] == [
        ("notify", "sent"), ("notify", "dead"), ("withdraw", "pending")]

    a = await harness.actor("ann")
    async with harness.services.db.connection() as conn:
        await add_device(conn, a.user_id)
    tid = await new_thread(a.user)
    call_id, _ = await post_card(a.agent, tid, CHOICE_QUESTION)
    cid = f"{call_id}:q1"
    async with harness.services.db.transaction() as conn:
        carrier = await conn.fetchval("SELECT decision_id FROM message_components"
                                      " WHERE user_id = $1::uuid AND id = $2", a.user_id, cid)
        await conn.execute("UPDATE push_outbox SET status = 'sent', attempts = 1,"
                           " sent_at = now() WHERE decision_id = $1", carrier)
        await conn.execute("INSERT INTO push_outbox (user_id, device_id, decision_id, kind,"
                           " collapse_id, payload) SELECT user_id, device_id, decision_id,"
                           " 'notify', collapse_id, payload FROM push_outbox"
                           " WHERE decision_id = $1", carrier)
    resp = await a.user.post(f"/v1/components/{cid}/answer", json={"selected": ["keep"]})
    assert resp.status_code == 200, resp.text
    async with harness.services.db.connection() as conn:
        stream = [(r["kind"], r["status"]) for r in await conn.fetch(
            "SELECT kind, status FROM push_outbox WHERE user_id = $1::uuid"
            " AND decision_id = $2 ORDER BY id", a.user_id, carrier)]
    assert stream == [("notify", "sent"), ("notify", "dead"), ("withdraw", "pending")]


async def test_a_notify_claimed_while_the_withdraw_runs_still_gets_its_withdraw(
        harness: Harness) -> None:
    """The race the cancel must not lose: the dispatcher's claim holds the row lock when the
    settle's withdraw reaches it; the withdraw waits, sees the row is no longer pending, does
    not cancel it, and queues the withdraw that follows it."""
    user_id, decision = await setup_decision(harness, devices=1)
    async with harness.services.db.transaction() as conn:
        await enqueue_notification(conn, user_id=user_id, decision=decision, thread_title="t")
    claimer = await connect(harness.services.db.url)
    settler = await connect(harness.services.db.url)
    try:
        claim = claimer.transaction()
        await claim.start()
        [held] = await store.claim_due(claimer, now=datetime.now(UTC), limit=1, lease_s=60)

        async def settle() -> int:
            async with settler.transaction():
                return await enqueue_withdraw(settler, user_id=user_id, decision=decision)

        settling = asyncio.create_task(settle())
        await asyncio.sleep(0.3)
        assert not settling.done()  # waiting on the claim's row lock
        await claim.commit()
        assert await asyncio.wait_for(settling, 10) == 1
    finally:
        await claimer.close()
        await settler.close()
    by_id = {r["id"]: r for r in await rows(harness)}
    assert by_id[held.id]["status"] == "sending"
    assert [r["kind"] for r in by_id.values()] == ["notify", "withdraw"]


async def test_a_failed_notify_whose_decision_settled_meanwhile_is_not_retried(
        harness: Harness) -> None:
    """The notification is in flight when the decision settles (its withdraw is queued behind
    it), and the attempt fails: it is given up as superseded rather than sent again (a settled
    question shown, then taken back), and the withdraw goes next. Without a withdraw the same
    failure is retried. (test_db_faults once found the notification left pending before its
    withdraw.)"""
    user_id, decision, held = await claimed_notification(harness, devices=1)
    now = datetime.now(UTC)
    async with harness.services.db.connection() as conn:
        async with conn.transaction():
            assert await enqueue_withdraw(conn, user_id=user_id, decision=decision) == 1
        assert await store.schedule_retry(conn, user_id=user_id, outbox_id=held.id,
                                          attempt=held.attempts, next_attempt_at=now,
                                          error="HTTP 503") == "dead"
        later = datetime.now(UTC) + timedelta(seconds=1)
        [after] = await store.claim_due(conn, now=later, limit=10, lease_s=60)
        assert after.kind == "withdraw"
    by_id = {r["id"]: r for r in await rows(harness)}
    gone = by_id[held.id]
    assert (gone["status"], gone["attempts"]) == ("dead", 1)
    assert gone["last_error"].startswith("superseded") and "HTTP 503" in gone["last_error"]

    other, _, mine = await claimed_notification(harness, name="eve", component_id="call_2:q1")
    async with harness.services.db.connection() as conn:
        assert await store.schedule_retry(conn, user_id=other, outbox_id=mine.id,
                                          attempt=mine.attempts, next_attempt_at=now,
                                          error="HTTP 503") == "pending"


async def test_claims_take_turns_between_users(harness: Harness) -> None:
    """One user's 300 queued pushes do not hold back another user's one, queued after them:
    a claim gives each user an equal share, and the busy user's share is its oldest rows."""
    busy, decision = await setup_decision(harness, devices=300)
    quiet, other = await setup_decision(harness, name="eve", devices=1,
                                         component_id="call_2:q1")
    async with harness.services.db.transaction() as conn:
        assert await enqueue_notification(conn, user_id=busy, decision=decision,
                                          thread_title="t") == 300
    async with harness.services.db.transaction() as conn:
        assert await enqueue_notification(conn, user_id=quiet, decision=other,
                                          thread_title="t") == 1
    now = datetime.now(UTC) + timedelta(seconds=1)
    async with harness.services.db.connection() as conn:
        claimed = await store.claim_due(conn, now=now, limit=4, lease_s=60)
        busy_ids = sorted(r["id"] for r in await conn.fetch(
            "SELECT id FROM push_outbox WHERE user_id = $1", busy))
        # the busy user's share unused by the quiet one is taken by the next claim
        refill = await store.claim_due(conn, now=now, limit=4, lease_s=60)
    by_user = Counter(r.user_id for r in claimed)
    assert by_user == {busy: 2, quiet: 1}
    assert sorted(r.id for r in claimed if r.user_id == busy) == busy_ids[:2]
    assert sorted(r.id for r in refill) == busy_ids[2:6]


async def test_skip_locked_claims_are_disjoint(harness: Harness) -> None:
    user_id, decision = await setup_decision(harness, devices=6)
    async with harness.services.db.transaction() as conn:
        await enqueue_notification(conn, user_id=user_id, decision=decision, thread_title="t")
    now = datetime.now(UTC)
    first = await connect(harness.services.db.url)
    second = await connect(harness.services.db.url)
    try:
        async with first.transaction():  # holds its row locks until the block ends
            a = await store.claim_due(first, now=now, limit=4, lease_s=60)
            b = await asyncio.wait_for(store.claim_due(second, now=now, limit=4, lease_s=60), 10)
        assert len(a) == 4
        assert len(b) == 2
        assert not {r.id for r in a} & {r.id for r in b}
    finally:
        await first.close()
        await second.close()


async def test_a_lapsed_lease_is_claimed_again_and_fences_the_old_holder(
        harness: Harness) -> None:
    user_id, decision = await setup_decision(harness, devices=2)
    async with harness.services.db.transaction() as conn:
        await enqueue_notification(conn, user_id=user_id, decision=decision, thread_title="t")
    clock = ManualClock(datetime.now(UTC))
    async with harness.services.db.connection() as conn:
        held = await store.claim_due(conn, now=clock.now(), limit=10, lease_s=30)
        assert len(held) == 2
        assert all(r.attempts == 1 for r in held)
        assert await store.claim_due(conn, now=clock.now(), limit=10, lease_s=30) == []
        clock.advance(29)
        assert await store.claim_due(conn, now=clock.now(), limit=10, lease_s=30) == []
        clock.advance(2)  # the first holder died: its lease lapsed
        again = await store.claim_due(conn, now=clock.now(), limit=10, lease_s=30)
        assert sorted(r.id for r in again) == sorted(r.id for r in held)
        assert all(r.attempts == 2 for r in again)
        late = held[0]
        key = {"user_id": user_id, "outbox_id": late.id}
        assert not await store.mark_sent(conn, **key, attempt=1, now=clock.now())
        assert not await store.schedule_retry(conn, **key, attempt=1,
                                              next_attempt_at=clock.now(), error="x")
        assert await store.mark_sent(conn, **key, attempt=2, now=clock.now())
    statuses = {r["id"]: r["status"] for r in await rows(harness)}
    assert statuses[late.id] == "sent"


async def test_failures_back_off_then_end_dead_with_the_error(harness: Harness) -> None:
    user_id, decision = await setup_decision(harness)
    async with harness.services.db.transaction() as conn:
        await enqueue_notification(conn, user_id=user_id, decision=decision, thread_title="t")
    clock = ManualClock(datetime.now(UTC))
    adapter = ScriptedAdapter(fail=99)
    d = dispatcher(harness, adapter, clock, push_max_attempts=3, push_backoff_base_s=10.0,
                   push_backoff_max_s=15.0)
    assert await d.run_once() == 1
    [row] = await rows(harness)
    assert row["status"] == "pending"
    assert row["attempts"] == 1
    assert row["last_error"] == "HTTP 503 on call 1"
    wait = (row["next_attempt_at"] - clock.now()).total_seconds()
    assert 5.0 <= wait <= 10.0  # base 10 s, jittered into [5, 10]
    assert await d.run_once() == 0  # not due yet
    clock.advance(10)
    assert await d.run_once() == 1
    [row] = await rows(harness)
    wait = (row["next_attempt_at"] - clock.now()).total_seconds()
    assert 7.5 <= wait <= 15.0  # 20 s capped at 15, jittered into [7.5, 15]
    clock.advance(15)
    assert await d.run_once() == 1
    [row] = await rows(harness)
    assert (row["status"], row["attempts"]) == ("dead", 3)
    assert row["last_error"] == "HTTP 503 on call 3"
    clock.advance(1000)
    assert await d.run_once() == 0
    assert len(adapter.calls) == 3
    pushes = harness.services.metrics.pushes
    assert pushes.labels("webhook", "retry")._value.get() == 2
    assert pushes.labels("webhook", "dead")._value.get() == 1


async def test_permanent_failure_is_dead_at_once(harness: Harness) -> None:
    user_id, decision = await setup_decision(harness)
    async with harness.services.db.transaction() as conn:
        await enqueue_notification(conn, user_id=user_id, decision=decision, thread_title="t")
    adapter = ScriptedAdapter(fail=99, retryable=False)
    d = dispatcher(harness, adapter, ManualClock(datetime.now(UTC)))
    assert await d.run_once() == 1
    [row] = await rows(harness)
    assert (row["status"], row["attempts"], row["last_error"]) == ("dead", 1, "HTTP 503 on call 1")


async def test_a_row_whose_last_lease_lapsed_is_given_up(harness: Harness) -> None:
    user_id, decision = await setup_decision(harness)
    async with harness.services.db.transaction() as conn:
        await enqueue_notification(conn, user_id=user_id, decision=decision, thread_title="t")
    clock = ManualClock(datetime.now(UTC))
    async with harness.services.db.connection() as conn:
        for _ in range(2):  # two dispatchers died holding it
            assert len(await store.claim_due(conn, now=clock.now(), limit=1, lease_s=60)) == 1
            clock.advance(61)
    adapter = ScriptedAdapter()
    d = dispatcher(harness, adapter, clock, push_max_attempts=2)
    assert await d.run_once() == 1
    [row] = await rows(harness)
    assert row["status"] == "dead"
    assert "lease lapsed" in row["last_error"]
    assert adapter.calls == []


async def test_two_dispatchers_send_each_row_exactly_once(harness: Harness) -> None:
    actor = await harness.actor("max")
    async with Endpoint() as endpoint:
        async with harness.services.db.transaction() as conn:
            for i in range(5):
                await add_device(conn, actor.user_id, url=f"{endpoint.url}/hook/{i}")
            for i in range(40):
                decision = await insert_decision(conn, actor.user_id, actor.main_thread_id,
                                                 f"call_{i}:q1", options=CHOICE)
                await enqueue_notification(conn, user_id=actor.user_id, decision=decision,
                                           thread_title="t")
        settings = harness.services.settings.model_copy(update={"push_allow_private_urls": True})
        pools = [Database(harness.services.db.url, min_size=1, max_size=5) for _ in range(2)]
        workers = []
        for pool in pools:
            await pool.open()
            http = HttpSender(timeout_s=10, allow_private=True)
            workers.append(Dispatcher(pool, {"webhook": WebhookAdapter(http)}, settings=settings,
                                      metrics=harness.services.metrics, batch=7, listen=False))
        try:
            claimed = await asyncio.gather(*(w.run_until_idle() for w in workers))
        finally:
            for w, pool in zip(workers, pools, strict=True):
                await w.close()
                await pool.close()
    delivered = endpoint.delivered()
    assert len(delivered) == 200
    assert set(delivered.values()) == {1}
    assert len(endpoint.hits) == 200
    assert sum(claimed) == 200
    assert all(c > 0 for c in claimed)
    statuses = {r["status"] for r in await rows(harness)}
    assert statuses == {"sent"}


class GatedAdapter:
    """Holds the sends to the URLs in ``gated`` until ``release`` is set; counts how many sends
    run at once, overall and per URL host."""

    platform = "webhook"

    def __init__(self, gated: set[str] | None = None, delay_s: float = 0.0) -> None:
        self.gated = gated or set()
        self.delay_s = delay_s
        self.release = asyncio.Event()
        self.started: list[int] = []
        self.running: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.peak_total = 0

    async def send(self, delivery: Delivery) -> None:
        url = str(delivery.config["url"])
        host = url.split("/")[2]
        self.started.append(delivery.outbox_id)
        self.running[host] = self.running.get(host, 0) + 1
        self.peak[host] = max(self.peak.get(host, 0), self.running[host])
        self.peak_total = max(self.peak_total, sum(self.running.values()))
        try:
            if url in self.gated:
                await self.release.wait()
            await asyncio.sleep(self.delay_s)
        finally:
            self.running[host] -= 1

    async def close(self) -> None:
        return None


async def wait_for_status(h: Harness, expected: dict[str, int], timeout_s: float = 10) -> None:
    async with asyncio.timeout(timeout_s):
        while True:
            got = Counter(r["status"] for r in await rows(h))
            if got == Counter(expected):
                return
            await asyncio.sleep(0.02)


async def test_each_delivery_is_acknowledged_when_it_completes(harness: Harness) -> None:
    """One send hangs; the other nine are marked sent meanwhile, so a crash now would re-send
    only the one in flight (the pass-wide acknowledgement re-sent all ten)."""
    user_id, decision = await setup_decision(harness, devices=10)
    async with harness.services.db.transaction() as conn:
        await enqueue_notification(conn, user_id=user_id, decision=decision, thread_title="t")
    adapter = GatedAdapter(gated={"http://127.0.0.1:9/3"})
    d = dispatcher(harness, adapter)
    passing = asyncio.create_task(d.run_once())
    try:
        await wait_for_status(harness, {"sent": 9, "sending": 1})
        # the acknowledgements' commit is visible a moment before each delivery's task ends
        # and leaves the held set: give those tasks their turn, bounded, while one still hangs
        async with asyncio.timeout(5):
            while d.in_flight > 1:  # noqa: ASYNC110 - the dispatcher has no event for it
                await asyncio.sleep(0.01)
        assert d.in_flight == 1
    finally:
        adapter.release.set()
    assert await passing == 10
    assert d.in_flight == 0
    assert {r["status"] for r in await rows(harness)} == {"sent"}


async def test_an_acknowledgement_queued_as_the_last_writer_ends_is_written(
        harness: Harness) -> None:
    """A delivery whose acknowledgement is queued right after the last writer's final look at
    the queue, before that writer is off the writer set, still gets written. (The writer left
    the set in a done-callback, which runs after the coroutines its results wake: the push
    crash proof once ended with 7 rows 'sending' for 90 s, their acknowledgements never
    written and their leases kept alive by the heartbeat.) One writer slot makes the gap
    deterministic: the first acknowledgement's result wakes this test before the callback."""
    user_id, decision = await setup_decision(harness, devices=2)
    async with harness.services.db.transaction() as conn:
        await enqueue_notification(conn, user_id=user_id, decision=decision, thread_title="t")
        claimed = await store.claim_due(conn, now=datetime.now(UTC), limit=2, lease_s=30)
    assert len(claimed) == 2
    first, second = (Delivery(
        outbox_id=r.id, user_id=r.user_id, device_id=r.device_id, decision_id=r.decision_id,
        kind=r.kind, payload=r.payload, platform=r.platform, config=r.config, secret=r.secret,
        attempt=r.attempts) for r in claimed)
    d = Dispatcher(harness.services.db, {"webhook": ScriptedAdapter()},
                   settings=harness.services.settings, metrics=harness.services.metrics,
                   listen=False, ack_writers=1)
    assert await d._acknowledge(first)
    async with asyncio.timeout(5):  # not wait_for: its new task would yield, closing the gap
        assert await d._acknowledge(second)
    assert [r["status"] for r in await rows(harness)] == ["sent", "sent"]


async def test_a_heartbeat_keeps_a_slow_send_from_being_raced(harness: Harness) -> None:
    """A 0.6 s lease and a send that takes 2 s: the heartbeat extends the lease, so a second
    dispatcher polling all along never claims the row; once the first one dies (its task is
    cancelled mid-send, no heartbeat), the second claims the row within a lease."""
    user_id, decision = await setup_decision(harness, devices=1)
    async with harness.services.db.transaction() as conn:
        await enqueue_notification(conn, user_id=user_id, decision=decision, thread_title="t")
    slow = GatedAdapter(delay_s=2.0)
    first = dispatcher(harness, slow)
    first.lease_s, first.heartbeat_s = 0.6, 0.2
    other = dispatcher(harness, GatedAdapter())
    other.lease_s = 0.6
    passing = asyncio.create_task(first.run_once())
    await wait_for_status(harness, {"sending": 1})
    loop = asyncio.get_running_loop()
    until = loop.time() + 1.5
    while loop.time() < until:
        assert await other.run_once() == 0
        await asyncio.sleep(0.05)
    assert await passing == 1
    assert [(r["status"], r["attempts"]) for r in await rows(harness)] == [("sent", 1)]
    # now a death: a second row, its sender cancelled mid-send with its heartbeat
    async with harness.services.db.transaction() as conn:
        await enqueue_notification(conn, user_id=user_id, decision=decision, thread_title="t")
    slow.delay_s = 30.0
    dying = asyncio.create_task(first.run_once())
    await wait_for_status(harness, {"sent": 1, "sending": 1})
    dying.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await dying
    died_at = loop.time()
    claimed = 0
    while not claimed:  # polls, as the other dispatcher's loop would
        claimed = await other.run_once()
        await asyncio.sleep(0.05)
    assert loop.time() - died_at < 0.6 + 0.5
    assert [(r["status"], r["attempts"]) for r in await rows(harness)] == [("sent", 1),
                                                                         ("sent", 2)]


async def test_deliveries_run_concurrently_within_their_bounds(harness: Harness) -> None:
    actor = await harness.actor("max")
    async with harness.services.db.transaction() as conn:
        for i in range(20):
            for host in ("127.0.0.1:9", "127.0.0.2:9"):  # alternating: each claim has both
                await add_device(conn, actor.user_id, url=f"http://{host}/{i}")
        decision = await insert_decision(conn, actor.user_id, actor.main_thread_id, "call_1:q1",
                                         options=CHOICE)
        assert await enqueue_notification(conn, user_id=actor.user_id, decision=decision,
                                          thread_title="t") == 40
    adapter = GatedAdapter(delay_s=0.05)
    d = Dispatcher(harness.services.db, {"webhook": adapter}, settings=harness.services.settings,
                   metrics=harness.services.metrics, listen=False, concurrency=8,
                   endpoint_concurrency=3)
    assert await d.run_until_idle() == 40
    assert len(adapter.started) == 40
    assert max(adapter.peak.values()) == 3  # per host
    assert adapter.peak_total == 6  # two hosts, three each (of eight slots)
    assert {r["status"] for r in await rows(harness)} == {"sent"}
