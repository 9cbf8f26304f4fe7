"""Issue 34: no tenant stalls another through its own data (a real ``maxclaw serve``).

Another user's ``GET /healthz`` is polled from a process of its own while one user's agent
sends the worst inputs; idle and loaded phases alternate in the same run (so a shared, busy
machine weighs on both alike), and the loaded p99 must stay within ``STALL_BOUND_MS`` of the
idle one. Before: finding 1's tool rows took 13 s each on the event loop (p99 12.5 s), and
finding 4's bodies were read, parsed and walked for their depth before the token was checked.
Now a body of more than ``MAX_BODY_STRINGS`` strings is refused from its bytes, and the worst
body accepted (that many strings in 1 MiB) is masked in one pass and written out once.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from maxclaw.jsonlimits import MAX_BODY_STRINGS
from tests.cards import ask_args, execute, new_thread, post_call
from tests.e2e.test_realtime_server import Cluster
from tests.trust.test_loop_stalls import p99_of, probe

# timing proofs: another user's p99 under one tenant's load against idle, which a parallel
# neighbour of make test's -n auto would weigh on (one failed at 73 ms vs 54 ms allowed while
# the whole suite ran beside it); make test-alone runs them by themselves, in CI too
pytestmark = pytest.mark.alone

STALL_BOUND_MS = 50.0  # the target, over the idle p99 of the same run
CARD_SECRETS = 8
SECRET_CARDS = 32
EMPTY_STRINGS = 330_000
PHASES = 3


def secret_card(n: int) -> dict[str, object]:
    return ask_args(*[{"id": f"s{q}", "kind": "secret", "question": f"Token {q}?"}
                      for q in range(CARD_SECRETS)], title=f"Secrets {n}")


async def phases(base: str, load: Callable[[int], Awaitable[None]],
                 idle_s: float = 1.5) -> tuple[float, float, int]:
    """(idle p99 ms, loaded p99 ms, loaded samples): ``PHASES`` idle phases and ``PHASES``
    loaded ones, alternating."""
    prober = await probe(base)
    spans: list[tuple[float, float]] = []
    try:
        await asyncio.sleep(idle_s)
        for n in range(PHASES):
            began = time.monotonic()
            await load(n)
            spans.append((began, time.monotonic()))
            await asyncio.sleep(idle_s)
        out, _ = await prober.communicate(b"stop\n")
    finally:
        if prober.returncode is None:
            prober.kill()
            await prober.wait()
    samples = json.loads(out)
    loaded = [d for t, d in samples if any(a <= t <= b for a, b in spans)]
    idle = [d for t, d in samples if not any(a - 0.2 <= t <= b + 0.2 for a, b in spans)]
    return p99_of(idle), p99_of(loaded), len(loaded)


async def test_tool_rows_of_empty_strings_in_a_thread_of_secrets_stall_no_one(
        database_url: str, tmp_path: Path) -> None:
    cluster = Cluster(database_url, tmp_path)
    try:
        server = cluster.start()
        eve = await cluster.user("eve", server)
        tid = await new_thread(eve.http)
        for n in range(SECRET_CARDS):  # the thread holds 256 live secrets
            call = await post_call(eve.agent, tid, "ask_user_question", secret_card(n))
            assert (await execute(eve.agent, tid, call)).status_code == 200
            answers = {f"s{q}": {"text": f"tok-{n}-{q}-{'z' * 24}"} for q in range(CARD_SECRETS)}
            resp = await eve.http.post(f"/v1/cards/{call}/answer", json={"answers": answers})
            assert resp.status_code == 200, resp.text
        # the row, refused from its bytes (more strings than a body may hold), and the
        # worst row accepted: as many strings as a body may hold, filling 1 MiB
        empty = json.dumps({"role": "tool", "tool_call_id": "x", "content": [""] * EMPTY_STRINGS},
                           separators=(",", ":"))
        full = json.dumps({"role": "tool", "tool_call_id": "x",
                           "content": ["s" * 18] * (MAX_BODY_STRINGS - 1000)},
                          separators=(",", ":"))
        for body in (empty, full):
            assert 950_000 < len(body) <= 1024 * 1024

        async def load(n: int) -> None:
            for k, (body, status) in enumerate([(empty, 422), (full, 201), (full, 201)]):
                resp = await eve.agent.post(f"/v1/agent/threads/{tid}/messages",
                                            content=body.replace('"x"', f'"x{n}-{k}"', 1),
                                            headers={"content-type": "application/json"})
                assert resp.status_code == status, resp.text

        idle, loaded, n = await phases(server.base_url, load)
    finally:
        await cluster.close()
    print(f"\n/healthz p99: idle {idle:.1f} ms, during 1 MiB tool rows in a thread of "
          f"{CARD_SECRETS * SECRET_CARDS} secrets {loaded:.1f} ms (n={n})")
    assert loaded < idle + STALL_BOUND_MS, f"p99 {loaded:.1f} ms, idle {idle:.1f} ms"


async def test_unauthenticated_mib_bodies_stall_no_one(database_url: str,
                                                      tmp_path: Path) -> None:
    cluster = Cluster(database_url, tmp_path)
    try:
        server = cluster.start()
        eve = await cluster.user("eve", server)
        deep = "[" * 60 + "]" * 60
        body = json.dumps({"role": "tool", "tool_call_id": "x",
                           "content": [json.loads(deep)] * 8_000})
        assert 900_000 < len(body) <= 1024 * 1024
        intruder = cluster.http(server, "mc_not-a-token")

        async def load(n: int) -> None:
            for _ in range(5):
                resp = await intruder.post(f"/v1/agent/threads/{eve.main_thread_id}/messages",
                                           content=body,
                                           headers={"content-type": "application/json"})
                assert resp.status_code in (401, 429), resp.text

        idle, loaded, n = await phases(server.base_url, load)
    finally:
        await cluster.close()
    print(f"\n/healthz p99: idle {idle:.1f} ms, during unauthenticated 1 MiB bodies "
          f"{loaded:.1f} ms (n={n})")
    assert loaded < idle + STALL_BOUND_MS, f"p99 {loaded:.1f} ms, idle {idle:.1f} ms"
