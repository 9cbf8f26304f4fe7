"""Races made deterministic: a blocker holds the component's row lock while two transitions
queue behind it in a chosen order, then lets go. The crash test finds these by chance; these
tests pin each one down."""

from __future__ import annotations

import asyncio

import asyncpg
import httpx

from maxclaw.db.database import connect
from tests.cards import CHOICE, new_thread, post_card
from tests.conftest import Harness
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
