"""Push delivery under ``kill -9``: a real ``maxclaw push-worker`` delivers a backlog to a
webhook receiver on 127.0.0.1 and is killed at a random moment mid-delivery, again and again.

After each kill the test reads, from the database alone, the rows that were in flight (claimed,
not acknowledged: ``sending``), restarts the worker and waits until every row is delivered.
After the first kill the worker waits the real 10 s lease out; after every other kill the test
forces the lease to lapse (it sets the lease end to now), so a hundred kills fit in minutes.
Either way duplicates are counted only once every row has been delivered again. Then:

- duplicates of this kill: every key the receiver got twice or more since the last count must
  be one of the rows in flight at the kill, so duplicates per kill <= rows in flight <= the
  dispatcher's concurrency (asserted);
- nothing lost: every row ends ``sent``, and every ``sent`` row reached the receiver (asserted);
- the restart's drain time, reported two ways: from spawning the new process (which includes
  its start: imports, the migration check) and from its first delivery. The target (15 s from
  the restart) is a figure, not an assertion (the machine's load decides the process start);
  the assertion is a loose 60 s, which a dispatcher waiting on anything but its own work
  would break.

Sized by ``MAXCLAW_PUSH_CRASH_KILLS`` (default 4 inside ``make test``; ``.ci/run`` runs 100 as
its own step, "push crash proof").
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from maxclaw.db.database import connect
from tests.reliability.figures import record
from tests.reliability.receiver import Receiver
from tests.reliability.support import provision

ROWS_PER_KILL = 200
DRAIN_LIMIT_S = 60.0
CONCURRENCY = 48  # the dispatcher's default push_concurrency


def kills() -> int:
    return max(1, int(os.environ.get("MAXCLAW_PUSH_CRASH_KILLS", "4")))


def worker(database_url: str, log: Any) -> subprocess.Popen[bytes]:
    env = {**os.environ, "MAXCLAW_PUSH_ALLOW_PRIVATE_URLS": "true", "MAXCLAW_LOG_JSON": "true",
           "MAXCLAW_LOG_LEVEL": "WARNING", "MAXCLAW_PUSH_CONCURRENCY": str(CONCURRENCY)}
    return subprocess.Popen([sys.executable, "-m", "maxclaw.cli", "push-worker",
                             "--database-url", database_url], env=env, stdout=log,
                            stderr=subprocess.STDOUT)


async def enqueue(conn: Any, devices: list[tuple[str, int]], n: int, trial: int) -> None:
    """``n`` notify rows over the devices (no decision: each row stands alone), and the hint."""
    picks = [devices[i % len(devices)] for i in range(n)]
    await conn.execute(
        "INSERT INTO push_outbox (user_id, device_id, kind, collapse_id, payload)"
        " SELECT u, d, 'notify', 'crash', jsonb_build_object('trial', $3::int, 'n', ord)"
        " FROM unnest($1::uuid[], $2::bigint[]) WITH ORDINALITY AS x(u, d, ord)",
        [u for u, _ in picks], [d for _, d in picks], trial)
    await conn.execute("SELECT pg_notify('maxclaw_push', '')")


async def counts(conn: Any) -> dict[str, int]:
    rows = await conn.fetch("SELECT status, count(*) AS n FROM push_outbox GROUP BY status")
    return {r["status"]: int(r["n"]) for r in rows}


async def wait_drained(conn: Any, receiver: Receiver, timeout_s: float) -> tuple[float, float]:
    """Seconds from now (the spawn) until nothing is queued, and from the first delivery."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    before, first = receiver.total, None
    while True:
        if first is None and receiver.total > before:
            first = loop.time()
        left = await conn.fetchval(
            "SELECT count(*) FROM push_outbox WHERE status IN ('pending', 'sending')")
        if left == 0:
            end = loop.time()
            return end - start, end - (first if first is not None else end)
        if loop.time() - start > timeout_s:
            stuck = await conn.fetch(
                "SELECT id, status, attempts, round(extract(epoch FROM next_attempt_at - now()))"
                " AS due_in_s, last_error FROM push_outbox"
                " WHERE status IN ('pending', 'sending') ORDER BY id LIMIT 10")
            raise AssertionError(f"{left} rows still queued {timeout_s:g}s after the restart,"
                                 f" e.g. {[dict(r) for r in stuck]}")
        await asyncio.sleep(0.02)


async def run_push_crash(database_url: str, n_kills: int, log_path: Path,
                         rng: random.Random) -> dict[str, Any]:
    receiver = await Receiver().start()
    parties = await provision(database_url, *[f"u{i}" for i in range(8)])
    conn = await connect(database_url)
    log = log_path.open("ab")
    proc: subprocess.Popen[bytes] | None = None
    problems: list[str] = []
    per_kill: list[dict[str, Any]] = []
    try:
        devices: list[tuple[str, int]] = []
        for p in parties:
            for k in range(2):  # two devices per user, one receiver
                url = f"{receiver.url}/{p.name}/{k}"
                devices.append((p.user_id, int(await conn.fetchval(
                    "INSERT INTO push_devices (user_id, platform, config, secret)"
                    " VALUES ($1, 'webhook', $2, $3) RETURNING id",
                    p.user_id, {"url": url, "address": url}, "s" * 32))))
        proc = worker(database_url, log)
        seen_dups: dict[str, int] = {}
        for trial in range(n_kills):
            before = receiver.total
            await enqueue(conn, devices, ROWS_PER_KILL, trial)
            # kill somewhere inside this trial's deliveries (the first ones need a started worker)
            target = before + rng.randint(1, ROWS_PER_KILL - CONCURRENCY)
            async with asyncio.timeout(60):
                await receiver.wait_total(target)
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            sending = {str(r["id"]) for r in await conn.fetch(
                "SELECT id FROM push_outbox WHERE status = 'sending'")}
            if trial > 0:  # the lease, forced to lapse: what a dispatcher sees 10 s later
                await conn.execute("UPDATE push_outbox SET next_attempt_at = now(),"
                                   " lease_until = now() WHERE status = 'sending'")
            proc = worker(database_url, log)
            drain_s, from_first_s = await wait_drained(conn, receiver, DRAIN_LIMIT_S + 30)
            await asyncio.sleep(0.05)  # the last responses' bookkeeping in the receiver
            dups = {k: n - 1 for k, n in receiver.deliveries.items() if n > 1}
            new = {k: n - seen_dups.get(k, 0) for k, n in dups.items()
                   if n > seen_dups.get(k, 0)}
            seen_dups = dups
            outside = sorted(set(new) - sending)
            if outside:
                problems.append(f"kill {trial}: duplicates of rows not in flight: {outside[:10]}")
            duplicates = sum(new.values())
            if duplicates > len(sending):
                problems.append(f"kill {trial}: {duplicates} duplicates > {len(sending)} in flight")
            if drain_s > DRAIN_LIMIT_S:
                problems.append(f"kill {trial}: drained {drain_s:.1f}s after the restart")
            per_kill.append({"in_flight": len(sending), "duplicates": duplicates,
                             "drain_s": drain_s, "from_first_s": from_first_s})
        final = await counts(conn)
        sent = {str(r["id"]) for r in await conn.fetch(
            "SELECT id FROM push_outbox WHERE status = 'sent'")}
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        log.close()
        await conn.close()
        await receiver.stop()
    if final != {"sent": n_kills * ROWS_PER_KILL}:
        problems.append(f"outbox ended {final}, not all {n_kills * ROWS_PER_KILL} sent")
    missing = sent - set(receiver.deliveries)
    if missing:
        problems.append(f"{len(missing)} rows marked sent never reached the receiver")
    unknown = set(receiver.deliveries) - sent
    if unknown:
        problems.append(f"the receiver got {len(unknown)} keys that are no sent row")
    forced = per_kill[1:] or per_kill
    drains = sorted(k["drain_s"] for k in forced)
    own = sorted(k["from_first_s"] for k in forced)
    return {
        "problems": problems,
        "kills": n_kills, "rows": n_kills * ROWS_PER_KILL,
        "deliveries": receiver.total,
        "duplicates": sum(k["duplicates"] for k in per_kill),
        "max_duplicates_per_kill": max(k["duplicates"] for k in per_kill),
        "max_in_flight_at_kill": max(k["in_flight"] for k in per_kill),
        "mean_in_flight_at_kill": round(statistics.mean(k["in_flight"] for k in per_kill)),
        "drain_from_spawn_p50_ms": round(1000 * drains[len(drains) // 2]),
        "drain_from_spawn_max_ms": round(1000 * drains[-1]),
        "drain_from_first_delivery_max_ms": round(1000 * own[-1]),
        "drain_after_real_lease_ms": round(1000 * per_kill[0]["drain_s"]),
        "restarts_over_15s": sum(k["drain_s"] > 15.0 for k in per_kill[1:]),
    }


@pytest.mark.slow
@pytest.mark.timeout(120 + 20 * kills())
async def test_kill_9_mid_delivery_resends_only_what_was_in_flight(
        database_url: str, tmp_path: Path) -> None:
    n = kills()
    seed = int(os.environ.get("MAXCLAW_RELIABILITY_SEED", random.randrange(10**6)))
    figures = await run_push_crash(database_url, n, tmp_path / "push-worker.log",
                                   random.Random(seed))
    problems = figures.pop("problems")
    record("push_crash", **figures)
    print(f"push crash: seed={seed} {figures}")
    assert not problems, "\n".join(problems[:40])
    assert figures["max_duplicates_per_kill"] <= CONCURRENCY
