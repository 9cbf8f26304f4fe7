"""Finding 2: one agent must not stall the event loop for everyone.

A real ``maxclaw serve``: one user's agent posts the guard's worst input (200 KB of
'Answer to "') and another reads pages of ~0.8 MB card rows, while a third party polls
``/healthz``. The figure is printed (the issue's target: p99 under 50 ms); the before-figures
for scale: 1.9 s for 60 KB of that text, 1.1 s for one 30-row page.

    .venv/bin/pytest tests/trust/test_loop_stalls.py -s
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from maxclaw.db.database import connect
from tests.cards import ask_args, execute, new_thread, post_call
from tests.e2e.test_realtime_server import Cluster
from tests.realtime_support import Client
from tests.trust.test_model_window import BULK_GROUPS  # u, a (one call), w, t per group

BIG_ROWS = 12
STALL_BOUND_MS = 100.0


def big_card() -> dict[str, Any]:
    blob = {"type": "diff", "content": "+" + "x" * 250_000}
    return ask_args(*[{"id": f"q{i}", "kind": "object", "question": "Apply?", "object": blob,
                       "actions": [{"id": "apply", "label": "Apply"}]} for i in range(3)],
                    title="Big")


PROBER = """
import json, select, sys, time, urllib.request
base, out = sys.argv[1], []
while not select.select([sys.stdin], [], [], 0)[0]:  # until the test writes a line
    start = time.monotonic()
    with urllib.request.urlopen(base + "/healthz", timeout=30) as resp:
        assert resp.status == 200
        resp.read()
    out.append((start, time.monotonic() - start))
    time.sleep(0.005)
print(json.dumps(out))
"""


async def probe(base: str) -> asyncio.subprocess.Process:
    """Poll /healthz from a process of its own (this test's loop is busy decoding pages, which
    must not count against the server) until a line arrives on its stdin; it then prints
    ``[(monotonic start, seconds)]`` (CLOCK_MONOTONIC is shared by the processes)."""
    return await asyncio.create_subprocess_exec(
        sys.executable, "-c", PROBER, base, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE)


async def test_no_request_moves_another_users_healthz_p99(database_url: str,
                                                         tmp_path: Path) -> None:
    cluster = Cluster(database_url, tmp_path)
    prober: asyncio.subprocess.Process | None = None
    try:
        server = cluster.start()
        eve = await cluster.user("eve", server)
        mallory = await cluster.user("mallory", server)
        tid = await new_thread(eve.http)
        for _ in range(BIG_ROWS):
            call = await post_call(eve.agent, tid, "ask_user_question", big_card())
            assert (await execute(eve.agent, tid, call)).status_code == 200
        forged = 'Answer to "' * (200_000 // 11)
        mtid = await new_thread(mallory.http)

        prober = await probe(server.base_url)
        await asyncio.sleep(2.0)  # the baseline: this machine's /healthz with nothing else on
        load_start = time.monotonic()
        page_bytes: list[int] = []
        for _ in range(4):
            resp = await mallory.agent.post(f"/v1/agent/threads/{mtid}/messages",
                                            json={"role": "assistant", "content": forged})
            assert resp.status_code == 201, resp.text
            after = 0
            while True:
                page = await eve.http.get(f"/v1/threads/{tid}/messages",
                                          params={"after_id": after, "limit": 30})
                assert page.status_code == 200
                page_bytes.append(len(page.content))
                after = page.json()["next_after_id"]
                if after is None:
                    break
        load_end = time.monotonic()
        out, _ = await prober.communicate(b"stop\n")
    finally:
        if prober is not None and prober.returncode is None:
            prober.kill()
            await prober.wait()
        await cluster.close()
    samples = json.loads(out)
    before = [d for t, d in samples if t < load_start]
    during = [d for t, d in samples if load_start <= t <= load_end]
    idle, loaded = p99_of(before), p99_of(during)
    print(f"\n/healthz p99: idle {idle:.1f} ms, under the worst inputs {loaded:.1f} ms "
          f"(n={len(during)}); largest page {max(page_bytes)} bytes")
    # one page is at most its byte budget (1 MiB of rows, or one row bigger than that)
    assert max(page_bytes) < 2 * 1024 * 1024
    # The target is 50 ms (reported above, compared in docs/reliability.md). The
    # assertion allows 100 ms over what /healthz costs here with nothing else running, so a
    # busy shared machine does not make it flaky; the stalls it replaced were 1.1 s and 1.9 s.
    assert loaded < idle + STALL_BOUND_MS, (
        f"/healthz p99 {loaded:.1f} ms (idle {idle:.1f} ms) while another user's requests ran")


def p99_of(seconds: list[float]) -> float:
    ms = sorted(s * 1000 for s in seconds)
    return ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))]


# -- claim, history and catch-up over a huge thread (the model window and the byte budgets) --

HUGE_GROUPS = 2_500  # four rows each: 10,000 rows in one thread
MIB_ROWS = 24  # and this many 1 MiB rows
MIB_THREAD_ROWS = """
INSERT INTO messages (user_id, thread_id, role, body)
SELECT $1::uuid, $2::uuid, 'assistant', 'mib ' || g || ' ' || repeat('x', 1024 * 1024)
  FROM generate_series(1, $3) g ORDER BY g
"""


@pytest.mark.slow  # ~35 s: 10,000 rows and 24 MiB through claim, history and a catch-up
async def test_claim_history_and_catch_up_of_a_huge_thread_do_not_stall_others(
        database_url: str, tmp_path: Path) -> None:
    """One user's agent claims a thread of 10,000 rows and 24 MiB and pages its whole history
    with the cursor, and the same user's client catches up over all of it from a null cursor,
    while another process polls /healthz. Before the model window and the byte budgets a
    claim read and encoded the whole thread at once, and a catch-up page held up to 500 of
    those 1 MiB rows."""
    cluster = Cluster(database_url, tmp_path)
    prober: asyncio.subprocess.Process | None = None
    try:
        server = cluster.start()
        eve = await cluster.user("eve", server)
        tid = await new_thread(eve.http)
        conn = await connect(database_url)
        try:
            await conn.execute(BULK_GROUPS, eve.user_id, tid, HUGE_GROUPS)
            await conn.execute(MIB_THREAD_ROWS, eve.user_id, tid, MIB_ROWS)
        finally:
            await conn.close()
        resp = await eve.http.post(f"/v1/threads/{tid}/messages", json={"body": "wake"})
        assert resp.status_code == 201, resp.text

        prober = await probe(server.base_url)
        await asyncio.sleep(2.0)  # the baseline
        load_start = time.monotonic()
        claim = await eve.agent.post("/v1/agent/turns/claim", json={"wait_s": 0})
        assert claim.status_code == 200, claim.text
        largest = len(claim.content)
        pages, before = 1, claim.json()["next_before_id"]
        while before is not None:
            page = await eve.agent.get(f"/v1/agent/threads/{tid}/history",
                                       params={"before_id": before})
            assert page.status_code == 200, page.text
            largest = max(largest, len(page.content))
            pages += 1
            before = page.json()["next_before_id"]
        client = await Client.open(Cluster.ws_url(server), eve.token, max_queue=None)
        try:
            caught_up = await client.subscribe(None, wait_s=60)
        finally:
            await client.close()
        load_end = time.monotonic()
        out, _ = await prober.communicate(b"stop\n")
    finally:
        if prober is not None and prober.returncode is None:
            prober.kill()
            await prober.wait()
        await cluster.close()
    messages = [f for f in caught_up if f["type"] == "record.upsert" and f["table"] == "messages"]
    assert len(messages) == 4 * HUGE_GROUPS + MIB_ROWS + 1  # every row, once
    assert pages > (4 * HUGE_GROUPS) // 500  # the cursor walked the whole thread
    samples = json.loads(out)
    idle = p99_of([d for t, d in samples if t < load_start])
    during = [d for t, d in samples if load_start <= t <= load_end]
    loaded = p99_of(during)
    print(f"\n/healthz p99: idle {idle:.1f} ms, during claim + {pages} history windows + "
          f"a catch-up of {len(messages)} rows ({MIB_ROWS} of 1 MiB) {loaded:.1f} ms "
          f"(n={len(during)}, {load_end - load_start:.1f} s); largest window {largest} bytes")
    # a window is at most its byte budget (2 MiB of rows, or one row bigger than that)
    assert largest < 2 * 1024 * 1024 + 1024 * 1024 + 64 * 1024
    assert loaded < idle + STALL_BOUND_MS, (
        f"/healthz p99 {loaded:.1f} ms (idle {idle:.1f} ms) while another user's requests ran")
