"""Presence re-judged (issue 16, item 6): a card posted while Max watched its thread (no
carrier, due in an hour) gets its carrier and push once he stops watching — his presence
lapses or he leaves — while it is still open, exactly once however many sweepers race; its due
time then follows ``main_after_minutes`` from that moment. A card settled before gets nothing.
Expired presence rows are purged."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

from maxclaw.components.sweeper import Sweeper
from tests import locks
from tests.cards import CHOICE, TEXT, new_thread, post_card
from tests.conftest import Actor, Harness


async def fetch(h: Harness, sql: str, *args: Any) -> list[dict[str, Any]]:
    async with h.services.db.connection() as conn:
        return [dict(r) for r in await conn.fetch(sql, *args)]


async def with_device(h: Harness, a: Actor) -> None:
    """A registered device, so a carrier's notification becomes an outbox row."""
    async with h.services.db.connection() as conn:
        await conn.execute("INSERT INTO push_devices (user_id, platform, config)"
                           " VALUES ($1::uuid, 'log', '{\"address\": \"log\"}'::jsonb)",
                           a.user_id)


async def watched_card(h: Harness, a: Actor, tid: str, conn_id: str,
                       **card: Any) -> str:
    """Post a card while ``conn_id`` has ``tid`` in focus; returns its first component."""
    await h.services.presence.focus(conn_id, a.user_id, tid)
    _, content = await post_card(a.agent, tid, CHOICE, **card)
    return str(content["components"][0]["id"])


async def component(a: Actor, cid: str) -> dict[str, Any]:
    return dict((await a.user.get(f"/v1/components/{cid}")).json())


async def notifications(h: Harness, user_id: str) -> list[dict[str, Any]]:
    return await fetch(h, "SELECT decision_id, payload FROM push_outbox WHERE user_id = $1::uuid"
                          " AND kind = 'notify' ORDER BY id", user_id)


async def test_a_watched_card_reaches_the_phone_once_max_looks_away(harness: Harness) -> None:
    a = await harness.actor("max")
    await with_device(harness, a)
    tid = await new_thread(a.user)
    cid = await watched_card(harness, a, tid, "tab", main_after_minutes=10)
    posted = await component(a, cid)
    assert posted["decision_id"] is None  # watched: no carrier, no push
    assert await notifications(harness, a.user_id) == []
    # still watched: the sweep leaves it alone
    assert await harness.services.components.sweep_unwatched() == 0
    # the presence lapses (no refresh within its TTL)
    async with harness.services.db.connection() as conn:
        await conn.execute("UPDATE presence SET expires_at = now() - interval '1 second'"
                           " WHERE connection_id = 'tab'")
    before = harness.services.clock.now()
    assert await harness.services.components.sweep_unwatched() == 1
    after = harness.services.clock.now()
    judged = await component(a, cid)
    assert judged["status"] == "open" and judged["decision_id"] is not None
    due = judged["due_at"]
    # due: main_after_minutes from the moment he stopped watching, not the watched hour
    due_at = datetime.fromisoformat(due.replace("Z", "+00:00"))
    assert before + timedelta(minutes=10) - timedelta(seconds=1) <= due_at \
        <= after + timedelta(minutes=10) + timedelta(seconds=1)
    # the card's mirror says so too (clients draw the due time from display.states)
    [tool_row] = await fetch(harness, "SELECT display FROM messages WHERE id = $1",
                             judged["tool_message_id"])
    assert tool_row["display"]["states"][cid]["due_at"] == due
    [note] = await notifications(harness, a.user_id)
    assert note["decision_id"] == judged["decision_id"]
    assert note["payload"]["kind"] == "agent-question"
    assert note["payload"]["body"] == CHOICE["question"]
    # judged once: another pass finds nothing
    assert await harness.services.components.sweep_unwatched() == 0
    assert len(await notifications(harness, a.user_id)) == 1


async def test_leaving_the_thread_counts_and_null_due_stays_null(harness: Harness) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    other = await new_thread(a.user)
    never = await watched_card(harness, a, tid, "tab", main_after_minutes=None)
    # he moves to another thread: this one is no longer watched
    await harness.services.presence.focus("tab", a.user_id, other)
    assert await harness.services.components.sweep_unwatched() == 1
    judged = await component(a, never)
    assert judged["decision_id"] is not None and judged["due_at"] is None
    cid = await watched_card(harness, a, other, "tab")
    await harness.services.presence.leave("tab", a.user_id)  # the tab closed
    assert await harness.services.components.sweep_unwatched() == 1
    assert (await component(a, cid))["decision_id"] is not None


async def test_a_card_settled_before_the_lapse_gets_nothing(harness: Harness) -> None:
    a = await harness.actor("max")
    await with_device(harness, a)
    tid = await new_thread(a.user)
    answered = await watched_card(harness, a, tid, "tab")
    withdrawn = await watched_card(harness, a, tid, "tab")
    resp = await a.user.post(f"/v1/components/{answered}/answer", json={"selected": ["keep"]})
    assert resp.status_code == 200, resp.text
    async with harness.services.db.connection() as conn:
        await conn.execute("UPDATE message_components SET status = 'withdrawn'"
                           " WHERE id = $1 AND user_id = $2::uuid", withdrawn, a.user_id)
    await harness.services.presence.leave("tab", a.user_id)
    assert await harness.services.components.sweep_unwatched() == 0
    for cid in (answered, withdrawn):
        assert (await component(a, cid))["decision_id"] is None
    assert await notifications(harness, a.user_id) == []
    assert await fetch(harness, "SELECT id FROM decisions WHERE user_id = $1::uuid",
                       a.user_id) == []


async def test_two_sweepers_racing_judge_each_card_once(harness: Harness) -> None:
    a = await harness.actor("max")
    b = await harness.actor("eve")
    await with_device(harness, a)
    await with_device(harness, b)
    cards: list[str] = []
    for actor in (a, b):
        for i in range(6):
            tid = await new_thread(actor.user)
            conn_id = f"{actor.name}-{i}"
            await harness.services.presence.focus(conn_id, actor.user_id, tid)
            _, content = await post_card(actor.agent, tid, CHOICE, TEXT)
            cards += [c["id"] for c in content["components"]]
            await harness.services.presence.leave(conn_id, actor.user_id)
    components = harness.services.components
    # small batches, so the two loops interleave their claims over separate connections
    judged = await asyncio.gather(components.sweep_unwatched_all(3),
                                  components.sweep_unwatched_all(3),
                                  components.sweep_unwatched_all(5))
    assert sum(judged) == len(cards) == 24
    for actor in (a, b):
        decisions = await fetch(harness, "SELECT component_id FROM decisions"
                                         " WHERE user_id = $1::uuid", actor.user_id)
        assert len(decisions) == 12 and len({d["component_id"] for d in decisions}) == 12
        notes = await notifications(harness, actor.user_id)
        assert len(notes) == 12 and len({n["decision_id"] for n in notes}) == 12
    assert await components.sweep_unwatched() == 0


async def test_the_sweeper_tick_rejudges_and_purges_lapsed_presence(harness: Harness) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    live = await new_thread(a.user)
    cid = await watched_card(harness, a, tid, "gone")
    await harness.services.presence.focus("here", a.user_id, live)
    async with harness.services.db.connection() as conn:
        await conn.execute("UPDATE presence SET expires_at = now() - interval '1 second'"
                           " WHERE connection_id = 'gone'")
    sweeper = Sweeper(harness.services.components, interval_s=60, batch=100,
                      presence=harness.services.presence)
    await sweeper.tick()
    assert (await component(a, cid))["decision_id"] is not None
    left = await fetch(harness, "SELECT connection_id FROM presence WHERE user_id = $1::uuid",
                       a.user_id)
    assert left == [{"connection_id": "here"}]  # the live row stays


async def test_an_answer_racing_the_sweep_settles_the_carrier_the_sweep_made(
        harness: Harness, database_url: str) -> None:
    """The sweep gives a watched card its carrier and push while Max answers it on the card.
    The answer waits for the sweep's lock on the card, so its statement's snapshot predates the
    sweep's carrier and push; it must still settle that carrier and withdraw that push. (It
    answered the card and left both: one statement, one snapshot, and ``FOR UPDATE``
    refreshes only the row it locks — store.ANSWER_SETTLE.)"""
    a = await harness.actor("max")
    await with_device(harness, a)
    tid = await new_thread(a.user)
    cid = await watched_card(harness, a, tid, "tab")
    await harness.services.presence.leave("tab", a.user_id)
    db = harness.services.db
    async with locks.hold_after(database_url, "push_outbox", "INSERT", "NEW.kind = 'notify'",
                                7301):
        sweep = asyncio.create_task(harness.services.components.sweep_unwatched())
        await locks.wait_for_lock_waiters(db, 1)  # the sweep holds the card, waits on its push
        answer = asyncio.create_task(a.user.post(f"/v1/components/{cid}/answer",
                                                 json={"selected": ["keep"]}))
        await locks.until_done_or_waiting(db, answer, 2)  # the answer waits for the card
    assert await sweep == 1
    resp = await answer
    assert resp.status_code == 200, resp.text
    [carrier] = await fetch(harness, "SELECT id, status FROM decisions WHERE user_id = $1::uuid"
                                     " AND component_id = $2", a.user_id, cid)
    assert carrier["status"] == "settled"
    pushes = await fetch(harness, "SELECT kind, status, attempts FROM push_outbox"
                                  " WHERE user_id = $1::uuid AND decision_id = $2 ORDER BY id",
                         a.user_id, carrier["id"])
    # the notify never went out (the answer cancelled it) or it is followed by its withdraw
    assert pushes[0]["kind"] == "notify"
    assert (pushes[0]["status"] == "dead" and pushes[0]["attempts"] == 0) or \
        [p["kind"] for p in pushes] == ["notify", "withdraw"], pushes
