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

from tests.cards import ask_args, execute, new_thread, post_call
from tests.e2e.test_realtime_server import Cluster

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
