"""Crash safety: ``kill -9`` the real server (and the operator's sweep processes) at random
moments under a concurrent load of posts, answers from every surface, hand-offs and sweeps;
after every kill the database alone must satisfy every invariant, and nothing the server
confirmed may be missing. Sized by ``MAXCLAW_RELIABILITY_SCALE`` (default 1: 5 trials)."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from maxclaw.db.database import connect
from tests.conftest import ServerProcess, start_server
from tests.reliability.figures import record, scale
from tests.reliability.invariants import check_url
from tests.reliability.receiver import Receiver
from tests.reliability.support import (
    Party,
    client,
    kill_hard,
    provision,
    restart,
    sweep_command,
    sweep_process,
)
from tests.reliability.workload import MAX_ANSWERS, Outcomes, Watcher, Workload, lost_acks

SERVER_ENV = {"MAXCLAW_SWEEP_INTERVAL_S": "0.5", "MAXCLAW_PUSH_ALLOW_PRIVATE_URLS": "true",
              "MAXCLAW_TURN_LEASE_S": "30"}


def _seed() -> int:
    return int(os.environ.get("MAXCLAW_RELIABILITY_SEED", random.randrange(10**6)))


async def _setup_party(base_url: str, party: Party, receiver: Receiver) -> list[str]:
    """Threads of every kind Main's rules distinguish, and two push devices."""
    async with client(base_url, party.user_token) as user:
        threads = []
        for fields in ({"title": "Work"}, {"title": "More work"}, {"title": "Side", "kind":
                       "isolated"}, {"title": "Filed", "category": "ops"}):
            resp = await user.post("/v1/threads", json=fields)
            assert resp.status_code == 201, resp.text
            threads.append(resp.json()["id"])
        for device in ({"platform": "webhook", "url": receiver.url, "secret": "s" * 32},
                       {"platform": "log"}):
            resp = await user.post("/v1/push/devices", json=device)
            assert resp.status_code == 201, resp.text
    return [*threads, party.main_thread_id]


async def _component_ids(url: str) -> list[str]:
    conn = await connect(url)
    try:
        return [r["id"] for r in await conn.fetch("SELECT id FROM message_components")]
    finally:
        await conn.close()


def _double_winners(outcomes: list[Outcomes]) -> list[str]:
    """Max's answer is final: a component can be confirmed answered by Max only once, ever."""
    wins = Counter(key for out in outcomes for op, key in out.acked if op in MAX_ANSWERS)
    return [f"{cid} answered by Max {n} times" for cid, n in wins.items() if n > 1]


def _kill_sweeps(sweeps: list[subprocess.Popen[bytes]]) -> int:
    killed = 0
    for proc in sweeps:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            killed += 1
        proc.communicate(timeout=10)  # reaps it and closes its pipes
    return killed


async def _trial(server: ServerProcess, parties: list[Party], threads: dict[str, list[str]],
                 paths: set[str], rng: random.Random) -> tuple[list[Outcomes], dict[str, Any]]:
    """One load-and-kill round; returns the outcomes and what the killer did."""
    existing = await _component_ids(server.database_url)
    loads = [Workload(server.base_url, p, threads[p.name], paths, rng,
                      max_cards=40 * scale()) for p in parties]
    jobs: list[Any] = []
    for w in loads:
        jobs += [w.card_worker() for _ in range(6)]
        jobs += [w.old_worker(existing), w.message_worker(), w.runtime_worker()]
    sweeps: list[subprocess.Popen[bytes]] = []
    facts: dict[str, Any] = {"kill_after_s": round(rng.uniform(1.0, 5.0), 2)}

    async def operator() -> None:
        for _ in range(2):  # cron-style passes while the server is busy
            await asyncio.sleep(rng.uniform(0.0, facts["kill_after_s"]))
            sweeps.append(sweep_process(server.database_url))

    async def killer() -> None:
        await asyncio.sleep(facts["kill_after_s"])
        facts["mid_load"] = any(w.cards < w.max_cards for w in loads)
        kill_hard(server)
        # the pushes in flight at the kill: the only rows that may be delivered twice
        facts["push_in_flight"] = await _sending_ids(server.database_url)
        facts["sweeps_killed"] = _kill_sweeps(sweeps)
        for w in loads:
            w.stop.set()

    try:
        await asyncio.gather(killer(), operator(), *jobs)
    finally:
        for w in loads:
            await w.close()
    facts["sweeps_killed"] += _kill_sweeps(sweeps)  # started after the kill: a no-op pass
    return [w.out for w in loads], facts


@pytest.mark.slow
@pytest.mark.timeout(240 * scale())
async def test_kill_9_under_load_keeps_every_invariant(database_url: str, tmp_path: Path) -> None:
    seed = _seed()
    rng = random.Random(seed)
    trials = 5 * scale()
    receiver = await Receiver().start()
    parties = await provision(database_url, "max", "ann")
    server = await asyncio.to_thread(start_server, database_url, tmp_path / "serve.log",
                                     None, SERVER_ENV)
    all_outcomes: list[Outcomes] = []
    push_in_flight: set[str] = set()
    in_flight_per_kill: list[int] = []
    violations: list[str] = []
    seen: set[str] = set()
    mid_load = sweeps_killed = 0
    try:
        threads = {p.name: await _setup_party(server.base_url, p, receiver) for p in parties}
        # normal threads are where Main may take cards: weight them so hand-offs happen
        threads = {name: [*t[:2], *t[:2], *t] for name, t in threads.items()}
        async with client(server.base_url, None) as anon:
            paths = set((await anon.get("/openapi.json")).json()["paths"])
        watcher = Watcher(server.base_url, parties[0].user_token)
        watching = asyncio.create_task(watcher.run())
        for trial in range(trials):
            outcomes, facts = await _trial(server, parties, threads, paths, rng)
            all_outcomes += outcomes
            mid_load += facts["mid_load"]
            push_in_flight |= facts["push_in_flight"]
            in_flight_per_kill.append(len(facts["push_in_flight"]))
            sweeps_killed += facts["sweeps_killed"]
            report = await check_url(database_url)
            # a violation stays in the database: report it once, from the trial that found it
            violations += [f"trial {trial} (seed {seed}): {v}" for v in report.violations
                           if v not in seen]
            seen.update(report.violations)
            lost = await lost_acks(database_url, all_outcomes)
            violations += [f"trial {trial}: {v}" for v in lost if v not in seen]
            seen.update(lost)
            violations += [f"trial {trial}: {e}" for o in outcomes for e in o.server_errors]
            server = await asyncio.to_thread(restart, server, SERVER_ENV)
        # after the last restart: a clean operator pass, then the service works as before
        sweep = await asyncio.to_thread(subprocess.run, sweep_command(database_url),
                                        capture_output=True, timeout=60)
        assert sweep.returncode == 0, sweep.stderr.decode()[-2000:]
        assert set(json.loads(sweep.stdout)) == {"handed_to_main", "kept_open"}
        final = Workload(server.base_url, parties[0], threads["max"], paths, rng, max_cards=3)
        await final.card_worker()
        await final.close()
        violations += final.out.server_errors
        assert final.out.posted_calls == 3, final.out.statuses
        report = await check_url(database_url)
        violations += [f"after restart: {v}" for v in report.violations if v not in seen]
        # max's WebSocket client, cut off by every kill, resumed from its cursor each time
        confirmed = {i for o in [*all_outcomes[0::2], final.out] for i in o.message_ids}
        try:
            async with asyncio.timeout(60):
                await watcher.wait_seen(confirmed)
        except TimeoutError:
            violations.append(f"{len(confirmed - watcher.seen)} confirmed rows never reached "
                              "the reconnecting WebSocket client")
        watching.cancel()
        violations += _double_winners(all_outcomes)
        # duplicates are counted once every push is settled: the rows in flight at the last
        # kill are re-sent only when their lease (10 s) has lapsed
        try:
            await _wait_pushes_settled(database_url, 60)
        except TimeoutError:
            violations.append("pushes still queued 60 s after the last restart")
    finally:
        server.stop()
        await receiver.stop()
    conn = await connect(database_url)
    try:
        sent = {str(r["id"]) for r in await conn.fetch(
            "SELECT id FROM push_outbox WHERE status = 'sent'")}
        known = {str(r["id"]) for r in await conn.fetch("SELECT id FROM push_outbox")}
    finally:
        await conn.close()
    violations += [f"outbox {i} is sent but never reached the webhook" for i in
                   sent - set(receiver.deliveries)
                   if await _is_webhook_row(database_url, i)]
    violations += [f"the webhook got delivery {k}, which is no outbox row"
                   for k in set(receiver.deliveries) - known]
    repeated = {k for k, n in receiver.deliveries.items() if n > 1}
    violations += [f"delivery {k} arrived twice but was not in flight at any kill"
                   for k in sorted(repeated - push_in_flight)]
    requests = sum(o.requests for o in all_outcomes)
    record("crash", trials=trials, kills=trials, kills_mid_load=mid_load,
           sweep_processes_killed=sweeps_killed, requests=requests,
           answers_fired=sum(o.answers_fired for o in all_outcomes),
           answers_confirmed=sum(op in MAX_ANSWERS for o in all_outcomes for op, _ in o.acked),
           cards_posted=sum(o.posted_calls for o in all_outcomes),
           components_checked=report.counts["components"],
           outbox_rows=report.counts["outbox_rows"], webhook_deliveries=sum(
               receiver.deliveries.values()),
           duplicate_deliveries=sum(n - 1 for n in receiver.deliveries.values()),
           pushes_in_flight_at_kills=sum(in_flight_per_kill),
           max_pushes_in_flight_at_a_kill=max(in_flight_per_kill, default=0),
           websocket_reconnects=watcher.connects - 1, rows_seen_over_websocket=len(confirmed),
           invariant_violations=len(violations))
    statuses: Counter[str] = Counter()
    for o in all_outcomes:
        statuses.update(o.statuses)
    print(f"crash: seed={seed} statuses={dict(sorted(statuses.items()))}")
    assert not violations, "\n".join(violations[:60])
    assert mid_load > 0, "no kill landed while requests were in flight; raise the load"


async def _is_webhook_row(url: str, outbox_id: str) -> bool:
    conn = await connect(url)
    try:
        return bool(await conn.fetchval(
            "SELECT d.platform = 'webhook' FROM push_outbox o JOIN push_devices d"
            " ON d.id = o.device_id WHERE o.id = $1", int(outbox_id)))
    finally:
        await conn.close()


async def _sending_ids(url: str) -> set[str]:
    conn = await connect(url)
    try:
        return {str(r["id"]) for r in await conn.fetch(
            "SELECT id FROM push_outbox WHERE status = 'sending'")}
    finally:
        await conn.close()


async def _wait_pushes_settled(url: str, timeout_s: float) -> None:
    """Until no push is pending or sending (the restarted server's dispatcher drains them)."""
    conn = await connect(url)
    try:
        async with asyncio.timeout(timeout_s):
            left = 1
            while left:
                left = await conn.fetchval(
                    "SELECT count(*) FROM push_outbox WHERE status IN ('pending', 'sending')")
                await asyncio.sleep(0.1)
    finally:
        await conn.close()
