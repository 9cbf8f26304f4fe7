"""Issue 34, finding 3: a realtime catch-up page is cut in the index, and one user's long
reads hold at most their share of the pool.

Before, a page measured ``octet_length(t::text)`` of every row the LIMIT kept, reading (and
detoasting) all of them to return the few that fit in 1 MiB: on a 145 MB history one socket
never reached ``synced`` in 120 s, and 20 sockets of one user took every pooled connection
(another user's ``GET /v1/threads`` p50 5.6 s)."""

from __future__ import annotations

import asyncio
import json
import time

from maxclaw.db.database import Database
from maxclaw.realtime import store
from maxclaw.realtime.cursor import ORIGIN
from tests.conftest import Harness

ROWS = 40
# about 1 MiB of text that does not compress (TOAST would shrink a repeat() to nothing)
BIG_ROWS = """
INSERT INTO messages (user_id, thread_id, role, body)
SELECT $1::uuid, $2::uuid, 'assistant',
       (SELECT string_agg(md5(g::text || '.' || k::text), '') FROM generate_series(1, 32768) k)
  FROM generate_series(1, $3) g ORDER BY g
"""
PAGE = 1024 * 1024
BLOCK = 8192


def blocks(plan: dict[str, object]) -> int:
    return int(plan.get("Shared Hit Blocks", 0)) + int(plan.get("Shared Read Blocks", 0))


async def test_a_catch_up_page_reads_about_its_budget_not_every_row(harness: Harness) -> None:
    eve = await harness.actor("eve")
    resp = await eve.user.post("/v1/threads", json={"title": "big", "kind": "normal"})
    tid = resp.json()["id"]
    async with harness.services.db.connection() as conn:
        await conn.execute(BIG_ROWS, eve.user_id, tid, ROWS)
        await conn.execute("VACUUM ANALYZE messages")
        page = await store.read_changes(conn, [eve.user_id], ORIGIN, limit=500, max_bytes=PAGE)
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            horizon = int(await conn.fetchval(store.HORIZON))
            explained = await conn.fetchval(
                "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + store._READS["messages"],
                [eve.user_id], "0", 0, str(horizon), None, 500, PAGE)
    plan = (json.loads(explained) if isinstance(explained, str) else explained)[0]["Plan"]
    # the page's rows are what fits (a 1 MiB row alone, or the rows before it), and the
    # catch-up goes on from where it stopped until every row has come, once
    seen, pages = [c.row.id for c in page.changes if c.table == "messages"], 1
    async with harness.services.db.connection() as conn:
        while not page.complete:
            page = await store.read_changes(conn, [eve.user_id], page.end, limit=500,
                                            max_bytes=PAGE)
            got = [c for c in page.changes if c.table == "messages"]
            assert len(got) <= 1 or sum(c.size for c in got) <= PAGE
            seen += [c.row.id for c in got]  # type: ignore[union-attr]
            pages += 1
    assert len(seen) == len(set(seen)) == ROWS and pages > ROWS // 2
    # EXPLAIN ANALYZE reads no output column's TOAST: what it counts is what the statement
    # itself read to find its page (the old one detoasted every row the LIMIT kept)
    # the page's own rows (~2 MiB of TOAST) and the index; not the 40 MiB the LIMIT covers
    assert blocks(plan) < 3 * PAGE // BLOCK + 200, blocks(plan)


async def test_one_users_long_reads_hold_at_most_their_share_of_the_pool(
        database_url: str) -> None:
    db = Database(database_url, min_size=1, max_size=8)
    await db.open()
    try:
        assert db.share == 2
        busy = 0
        most = 0

        async def long_read() -> None:
            nonlocal busy, most
            async with db.connection(share="eve") as conn:
                busy += 1
                most = max(most, busy)
                await conn.execute("SELECT pg_sleep(0.3)")
                busy -= 1

        reads = [asyncio.create_task(long_read()) for _ in range(12)]
        await asyncio.sleep(0.1)
        began = time.monotonic()
        async with db.connection() as conn:  # another user, meanwhile
            assert await conn.fetchval("SELECT 1") == 1
        waited = time.monotonic() - began
        await asyncio.gather(*reads)
    finally:
        await db.close()
    assert most == 2
    # the pool had connections to spare: no wait behind eve's twelve 0.3 s reads
    assert waited < 0.25, waited


SMALL_ROWS = """
INSERT INTO messages (user_id, thread_id, role, body)
SELECT $1::uuid, $2::uuid, 'assistant', 'row ' || g FROM generate_series(1, $3) g ORDER BY g
"""


async def test_a_catch_up_page_walks_the_users_index_in_order_and_stops(
        harness: Harness) -> None:
    """``user_id = ANY(…)`` cannot be read from the index in stream order, so the planner
    sorted every row of the user (a parallel sequential scan of the table, here); the page is
    read per user, in order, and stops at its LIMIT."""
    eve = await harness.actor("eve")
    async with harness.services.db.connection() as conn:
        await conn.execute(SMALL_ROWS, eve.user_id, eve.main_thread_id, 50_000)
        await conn.execute("VACUUM ANALYZE messages")
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            horizon = int(await conn.fetchval(store.HORIZON))
            lines = [r[0] for r in await conn.fetch(
                "EXPLAIN (ANALYZE, BUFFERS) " + store._READS["messages"],
                [eve.user_id], "0", 0, str(horizon), None, 500, PAGE)]
    plan = "\n".join(lines)
    assert "Seq Scan" not in plan, plan
    assert "Index Only Scan using messages_user_sync" in plan, plan
