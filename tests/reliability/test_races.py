"""Races made deterministic: a blocker holds the component's row lock while two transitions
queue behind it in a chosen order, then lets go. The crash test finds these by chance; these
tests pin each one down."""

from __future__ import annotations

import asyncio

import asyncpg
import httpx

from maxclaw.db.database import connect
from maxclaw.errors import Unavailable
from tests.cards import CHOICE, new_thread, post_card
from tests.conftest import Harness
from tests.integration.test_card_answer import CHOICE_B
from tests.reliability.invariants import assert_invariants


async def _lock_waiters(conn: asyncpg.Connection) -> int:
    return int(await conn.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND wait_event_type = 'Lock'"))


async def _queued_behind(blocker: asyncpg.Connection, probe: asyncpg.Connection, n: int,
                         request: asyncio.Task[httpx.Response]) -> None:
    """Wait until ``n`` backends wait for a lock (the request reached its CAS)."""
    async with asyncio.timeout(20):
        while await _lock_waiters(probe) < n:
            assert not request.done(), (await request).text
            await asyncio.sleep(0.01)  # polling pg_stat_activity: the only signal there is


async def test_an_answer_racing_a_hand_off_audits_the_state_it_really_left(
        harness: Harness, database_url: str) -> None:
    """to-main commits first, then the panel's answer (allowed from with-main) wins its CAS:
    the audit must say with-main → answered, not open → answered (the status the answer read
    before its CAS waited)."""
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    call_id, _ = await post_card(a.agent, tid, CHOICE)
    cid = f"{call_id}:q1"
    decision_id = (await a.user.get(f"/v1/components/{cid}")).json()["decision_id"]
    blocker, probe = await connect(database_url), await connect(database_url)
    try:
        lock = blocker.transaction()
        await lock.start()
        await blocker.execute("SELECT 1 FROM message_components WHERE id = $1 FOR UPDATE", cid)
        to_main = asyncio.create_task(a.user.post(f"/v1/components/{cid}/to-main"))
        await _queued_behind(blocker, probe, 1, to_main)
        settle = asyncio.create_task(a.user.post(f"/v1/decisions/{decision_id}/settle",
                                                 json={"selected": ["keep"]}))
        await _queued_behind(blocker, probe, 2, settle)
        await lock.rollback()
        moved, answered = await to_main, await settle
        assert moved.status_code == 200, moved.text
        assert answered.status_code == 200, answered.text
        trail = [tuple(r) for r in await probe.fetch(
            "SELECT from_status, to_status FROM component_audit WHERE component_id = $1"
            " ORDER BY id", cid)]
        assert trail == [("open", "with-main"), ("with-main", "answered")]
        await assert_invariants(probe)
    finally:
        await blocker.close()
        await probe.close()


async def test_a_plain_answer_takes_the_tool_row_before_the_threads_turn(
        harness: Harness, database_url: str) -> None:
    """The one-statement answer (``ANSWER_SETTLE``) keeps the lock order of the transaction
    paths: component, tool row, carrier, then the thread's turn. A blocker plays Main's answer
    of another question of the same card: it holds the shared tool row (its mirror), and while
    the plain answer waits, it wakes the asking thread — the turn insert Main's answer makes.
    With the tool row taken last (as PostgreSQL ran the statement's unreferenced CTEs), the
    answer had already inserted its uncommitted turn: the blocker's insert waited for it, the
    answer waited for the tool row, and one of them died of a deadlock (a 500)."""
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    call_id, _ = await post_card(a.agent, tid, CHOICE, CHOICE_B)
    async with harness.services.db.connection() as conn:
        tool_row = await conn.fetchval(
            "SELECT tool_message_id FROM message_components WHERE id = $1", f"{call_id}:q1")
    blocker, probe = await connect(database_url), await connect(database_url)
    try:
        lock = blocker.transaction()
        await lock.start()
        await blocker.execute("SELECT 1 FROM messages WHERE id = $1 FOR UPDATE", tool_row)
        answer = asyncio.create_task(a.user.post(f"/v1/components/{call_id}:q5/answer",
                                                 json={"selected": ["pg"]}))
        await _queued_behind(blocker, probe, 1, answer)
        async with asyncio.timeout(20):  # a deadlock is detected after deadlock_timeout (1 s)
            await blocker.execute(
                "INSERT INTO turns (user_id, thread_id) VALUES ($1::uuid, $2::uuid)"
                " ON CONFLICT (user_id, thread_id) WHERE status IN ('queued', 'running')"
                " DO NOTHING", a.user_id, tid)
        await lock.commit()
        answered = await answer
        assert answered.status_code == 200, answered.text
        await assert_invariants(probe)
    finally:
        await blocker.close()
        await probe.close()


async def test_a_transaction_aborted_by_a_deadlock_is_a_503_not_a_500(
        harness: Harness) -> None:
    """Two transactions of the service's own pool lock two rows in opposite orders: PostgreSQL
    aborts one of them, and the boundary reports it as ``Unavailable`` (a 503: retry), with
    nothing of it written — never the driver's error, which a route would answer with 500."""
    a = await harness.actor("max")
    one, two = await new_thread(a.user), await new_thread(a.user)
    db = harness.services.db
    both_hold = asyncio.Barrier(2)

    async def lock(first: str, second: str) -> None:
        async with db.transaction() as conn:
            await conn.execute("UPDATE threads SET title = 'x' WHERE id = $1::uuid", first)
            await both_hold.wait()
            await conn.execute("UPDATE threads SET title = 'y' WHERE id = $1::uuid", second)

    results = await asyncio.gather(lock(one, two), lock(two, one), return_exceptions=True)
    failed = [r for r in results if r is not None]
    assert len(failed) == 1 and isinstance(failed[0], Unavailable), results
    assert "nothing was written" in str(failed[0])
