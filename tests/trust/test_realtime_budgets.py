"""Finding 2: realtime reads have a byte budget (catch-up pages and the hub's live batches).

Cut by rows only (500 a catch-up page, 1,000 a live batch), a user with many 1 MiB rows would
make one read carry hundreds of MiB through one event loop. So every read
(``realtime.store.read_changes``) stops at ``realtime_batch_bytes`` (or at one row bigger than
that) and the reader continues from the cursor: each test checks that no read went over the
budget, and that every row still arrives once, in order.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, cast

import pytest

from maxclaw.db.database import connect
from maxclaw.realtime import frames
from maxclaw.realtime import store as rt_store
from maxclaw.realtime.cursor import ORIGIN, Position
from maxclaw.realtime.hub import RealtimeHub, Subscription
from maxclaw.realtime.sendqueue import SendQueue
from maxclaw.realtime.store import Change, Changes
from tests.realtime_support import live_server

BUDGET = 256 * 1024
ROW = 60_000  # bytes of body per big row: a few fit in the budget, the rest waits
ROWS = 40  # 2.4 MB: ten reads or so

BIG_ROWS = """
INSERT INTO messages (user_id, thread_id, role, body)
SELECT $1::uuid, $2::uuid, 'assistant', 'big ' || g || ' ' || repeat('x', $4)
  FROM generate_series(1, $3) g ORDER BY g
"""


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[Changes]:
    """Every realtime read (the hub's batches and the sockets' catch-up pages), recorded."""
    seen: list[Changes] = []
    real = rt_store.read_changes

    async def recording(*args: Any, **kwargs: Any) -> Changes:
        changes = await real(*args, **kwargs)
        seen.append(changes)
        return changes

    monkeypatch.setattr(rt_store, "read_changes", recording)
    return seen


def assert_within_budget(reads: list[Changes]) -> None:
    for read in reads:
        frames_bytes = sum(len(frames.record_frame(c).encode()) for c in read.changes)
        assert len(read.changes) <= 1 or frames_bytes <= BUDGET * 1.05, (
            f"a read of {len(read.changes)} rows sent {frames_bytes} bytes of frames")


def bodies(frames_: list[dict[str, Any]]) -> list[str]:
    return [f["record"]["body"].split(" ")[1] for f in frames_
            if f["type"] == "record.upsert" and f["table"] == "messages"
            and (f["record"]["body"] or "").startswith("big ")]


async def test_a_read_stops_at_its_byte_budget_and_resumes_exactly(database_url: str) -> None:
    """The store alone: reads from the origin until complete; each within the budget, and
    together every change once, in stream order."""
    async with live_server(database_url) as srv:
        max_ = await srv.user("max")
        conn = await connect(database_url)
        try:
            await conn.execute(BIG_ROWS, max_.user_id, max_.main_thread_id, ROWS, ROW)
            position, pages, got = ORIGIN, [], []
            while True:
                page = await rt_store.read_changes(conn, [max_.user_id], position, limit=500,
                                                   max_bytes=BUDGET)
                pages.append(page)
                got.extend(page.changes)
                position = max(position, page.end)
                if page.complete:
                    break
        finally:
            await conn.close()
    assert len(pages) >= ROWS * ROW // BUDGET
    assert_within_budget(pages)
    positions = [c.position for c in got]
    assert positions == sorted(set(positions)), "a change lost its order or came twice"
    bodies_ = [getattr(c.row, "body", None) or "" for c in got if c.table == "messages"]
    big = [b.split(" ")[1] for b in bodies_ if b.startswith("big ")]
    assert big == [str(g) for g in range(1, ROWS + 1)]


@pytest.fixture
async def srv(database_url: str) -> AsyncIterator[Any]:
    async with live_server(database_url, realtime_poll_s=0.2,
                           realtime_batch_bytes=BUDGET) as server:
        yield server


async def test_a_catch_up_over_big_rows_comes_in_budgeted_reads(srv: Any,
                                                                 reads: list[Changes]) -> None:
    max_ = await srv.user("max")
    client = await srv.client(max_.token)
    await client.subscribe(None)
    cursor = client.cursor
    await client.close()
    async with srv.services.db.transaction() as conn:
        await conn.execute(BIG_ROWS, max_.user_id, max_.main_thread_id, ROWS, ROW)

    reads.clear()
    again = await srv.client(max_.token)
    caught_up = await again.subscribe(cursor)
    assert bodies(caught_up) == [str(g) for g in range(1, ROWS + 1)]  # all, once, in order
    mine = [r for r in reads if any(c.user_id == max_.user_id for c in r.changes)]
    assert len(mine) >= ROWS * ROW // BUDGET
    assert_within_budget(reads)
    await again.close()


async def test_live_batches_of_a_large_write_stay_within_the_budget(
        srv: Any, reads: list[Changes]) -> None:
    """One transaction writes 2.4 MB while a client is live: the hub reads it a budget at a
    time and the client receives every row once, in order, without being closed as slow."""
    max_ = await srv.user("max")
    client = await srv.client(max_.token)
    await client.subscribe(None)
    reads.clear()
    start = len(client.frames)
    async with srv.services.db.transaction() as conn:
        await conn.execute(BIG_ROWS, max_.user_id, max_.main_thread_id, ROWS, ROW)
    await client.until(lambda: len(bodies(client.frames[start:])) >= ROWS, wait_s=30)
    assert bodies(client.frames[start:]) == [str(g) for g in range(1, ROWS + 1)]
    assert len([r for r in reads if r.changes]) >= ROWS * ROW // BUDGET
    assert_within_budget(reads)
    await client.drain()  # still open: not closed as too slow
    await client.close()



def test_a_run_pauses_a_socket_over_its_queue_bound_and_a_new_run_closes_it() -> None:
    """The hub's rule for a full send queue, on real objects: a run's later batches (one large
    write, read a budget at a time) pause the socket where it is covered and mark its user to
    be read again; only a new run (new changes, the tick) that still finds it full closes it
    as too slow. Judging every budgeted batch like a new write would close fast clients."""
    hub = RealtimeHub(cast(Any, None), poll_s=1.0)
    closed: list[str] = []
    change = Change("messages", Position(10, 5), "u1", "t1", {"id": 1}, 100)
    queue = SendQueue(10)
    queue.push("x" * 50)  # over its bound: the socket has not drained earlier batches
    sub = Subscription("u1", None, Position(10, 1), queue, lambda: closed.append("u1"))
    hub.attach(sub)
    changes = Changes([change], Position(10, 5), False)

    paused = hub._fan_out([sub], changes, continuing=True)
    assert paused == {sub} and sub.active and not closed
    assert sub.covered == Position(10, 1) and len(queue) == 1  # nothing queued, nothing skipped
    assert hub._pending["u1"] >= Position(10, 5)  # the next run reads for it

    assert hub._fan_out([sub], changes) == set()  # a new run, still full: too slow
    assert closed == ["u1"] and not sub.active
