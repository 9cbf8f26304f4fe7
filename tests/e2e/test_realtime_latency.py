"""Commit-to-frame latency on a real ``maxclaw serve`` (figures are printed, not asserted:
timing targets belong to the benchmark suite; this test asserts only that every write arrived).

    .venv/bin/python -m pytest tests/e2e/test_realtime_latency.py -s -m slow
"""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path

import pytest

from maxclaw.db.database import connect
from tests.cards import new_thread
from tests.e2e.test_realtime_server import Cluster
from tests.realtime_support import Client

WRITES = 300


def summary(name: str, seconds: list[float]) -> str:
    ms = sorted(s * 1000 for s in seconds)
    p99 = ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))]
    return (f"{name}: n={len(ms)} p50={statistics.median(ms):.1f} ms p99={p99:.1f} ms "
            f"max={ms[-1]:.1f} ms")


async def arrival(client: Client, message_id: int) -> float:
    """When the client got the frame for ``message_id`` (perf_counter)."""
    while True:
        frame = await client.recv(30)
        if frame.get("table") == "messages" and frame["record"]["id"] == message_id:
            return time.perf_counter()


@pytest.mark.slow
@pytest.mark.parametrize("n_clients", [1, 100])
async def test_commit_to_frame_latency(database_url: str, tmp_path: Path,
                                       n_clients: int) -> None:
    cluster = Cluster(database_url, tmp_path)
    try:
        server = cluster.start()
        max_ = await cluster.user("max", server)
        tid = await new_thread(max_.http)
        clients = [await Client.open(cluster.ws_url(server), max_.token, max_queue=None)
                   for _ in range(n_clients)]
        for client in clients:
            await client.subscribe(None)
        conn = await connect(database_url)
        first: list[float] = []
        last: list[float] = []
        try:
            for i in range(WRITES):
                message_id = await conn.fetchval(
                    "INSERT INTO messages (user_id, thread_id, role, body)"
                    " VALUES ($1::uuid, $2::uuid, 'user', $3) RETURNING id",
                    max_.user_id, tid, f"latency {i}")  # autocommit: returns after COMMIT
                committed = time.perf_counter()
                arrivals = await asyncio.gather(*(arrival(c, message_id) for c in clients))
                first.append(min(arrivals) - committed)
                last.append(max(arrivals) - committed)
                await asyncio.sleep(0.01)  # pacing: one write at a time, ~60-90 writes/s
        finally:
            await conn.close()
        rest: list[float] = []
        for i in range(WRITES // 3):
            started = time.perf_counter()
            resp = await max_.http.post(f"/v1/threads/{tid}/messages", json={"body": f"r{i}"})
            assert resp.status_code == 201
            got = await asyncio.gather(*(arrival(c, resp.json()["id"]) for c in clients))
            rest.append(max(got) - started)
        print(f"\n[{n_clients} client(s) on one serve process, one writer]")
        print(summary("commit -> frame, first client", first))
        print(summary("commit -> frame, last client", last))
        print(summary("POST /messages sent -> frame at last client", rest))
        assert len(first) == WRITES
        for client in clients:
            await client.close()
    finally:
        await cluster.close()
