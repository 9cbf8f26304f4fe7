"""``maxclaw push-worker`` as real processes: two of them on one database deliver every row
exactly once, then stop cleanly on Ctrl-C (SIGINT) and SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from maxclaw.push.outbox import enqueue_notification
from tests.conftest import Harness
from tests.integration.push_fakes import Endpoint, insert_decision


async def read_until(proc: asyncio.subprocess.Process, marker: bytes) -> bytes:
    """The process's output up to and including the first line holding ``marker``."""
    assert proc.stdout is not None
    seen = b""
    while marker not in seen:
        line = await proc.stdout.readline()
        if not line:
            raise AssertionError(f"exited before {marker!r}:\n{seen.decode()}")
        seen += line
    return seen


async def test_two_push_workers_deliver_each_row_once(harness: Harness) -> None:
    actor = await harness.actor("max")
    env = {**os.environ, "MAXCLAW_PUSH_ALLOW_PRIVATE_URLS": "true", "MAXCLAW_LOG_JSON": "true"}
    async with Endpoint() as endpoint:
        workers = [await asyncio.create_subprocess_exec(
            sys.executable, "-m", "maxclaw.cli", "push-worker", "--database-url",
            harness.services.db.url, env=env, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT) for _ in range(2)]
        try:
            # both are running (signal handlers installed, LISTEN up) before any row exists
            started = [await asyncio.wait_for(read_until(w, b"push worker running"), 60)
                       for w in workers]
            async with harness.services.db.transaction() as conn:
                for i in range(4):
                    url = f"{endpoint.url}/hook/{i}"
                    await conn.execute(
                        "INSERT INTO push_devices (user_id, platform, config, secret)"
                        " VALUES ($1, 'webhook', $2, $3)", actor.user_id,
                        {"url": url, "address": url}, "0123456789abcdef")
                for i in range(30):
                    decision = await insert_decision(conn, actor.user_id, actor.main_thread_id,
                                                     f"call_{i}:q1")
                    await enqueue_notification(conn, user_id=actor.user_id, decision=decision,
                                               thread_title="t")
            await endpoint.wait_delivered(120, timeout_s=90)
        finally:
            workers[0].send_signal(signal.SIGINT)
            workers[1].send_signal(signal.SIGTERM)
            rest = [(await asyncio.wait_for(w.communicate(), 30))[0] for w in workers]
    outputs = [a + b for a, b in zip(started, rest, strict=True)]
    assert [w.returncode for w in workers] == [0, 0], outputs
    delivered = endpoint.delivered()
    assert len(delivered) == 120
    assert set(delivered.values()) == {1}
    assert len(endpoint.hits) == 120
    for out in outputs:
        assert b"push worker stopped" in out
    assert sum(out.count(b'"msg": "push sent"') for out in outputs) == 120
    async with harness.services.db.connection() as conn:
        statuses = await conn.fetch("SELECT status, count(*) FROM push_outbox GROUP BY status")
    assert {r["status"]: r["count"] for r in statuses} == {"sent": 120}
