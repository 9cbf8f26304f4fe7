"""Database faults under load: the server's connections killed with ``pg_terminate_backend``,
and (on a cluster of the test's own, never the shared one) PostgreSQL stopped and started.

During a fault a request may fail only with ``503 unavailable`` in api.md's error shape, never
a 500; afterwards the service recovers by itself (no restart), its listeners catch up, and
nothing it confirmed is lost."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import httpx
import pytest

from maxclaw.db.database import connect
from maxclaw.db.urls import with_database
from tests.conftest import ServerProcess, start_server
from tests.reliability.figures import record, scale
from tests.reliability.invariants import check_url
from tests.reliability.receiver import Receiver
from tests.reliability.support import (
    Party,
    PrivateCluster,
    client,
    error_shape_problem,
    provision,
    terminate_backends,
    wait_ready,
)
from tests.reliability.workload import Outcomes, Watcher, Workload, lost_acks

SERVER_ENV = {"MAXCLAW_SWEEP_INTERVAL_S": "0.5", "MAXCLAW_PUSH_ALLOW_PRIVATE_URLS": "true",
              "MAXCLAW_DB_COMMAND_TIMEOUT_S": "5"}


async def _setup(base_url: str, party: Party, receiver: Receiver) -> list[str]:
    async with client(base_url, party.user_token) as user:
        threads = []
        for _ in range(3):
            resp = await user.post("/v1/threads", json={"title": "Work"})
            assert resp.status_code == 201, resp.text
            threads.append(resp.json()["id"])
        resp = await user.post("/v1/push/devices", json={
            "platform": "webhook", "url": receiver.url, "secret": "s" * 32})
        assert resp.status_code == 201, resp.text
    return threads


async def _paths(base_url: str) -> set[str]:
    async with client(base_url, None) as anon:
        return set((await anon.get("/openapi.json")).json()["paths"])


async def _unavailable_shape(outcomes: Outcomes) -> None:
    """Every 5xx of the load must be api.md's 503 (the workload keeps any other)."""
    assert not outcomes.server_errors, "\n".join(outcomes.server_errors[:20])


async def _catches_up(server: ServerProcess, party: Party, receiver: Receiver,
                      threads: list[str], paths: set[str]) -> dict[str, int]:
    """After a fault: a waiting runtime is woken by a new message (the turn LISTENer), a new
    card's notification reaches the webhook (the push dispatcher), and plain requests work."""
    checks: dict[str, int] = {}
    async with client(server.base_url, party.user_token) as user, \
            client(server.base_url, party.agent_token) as agent:
        if "/v1/agent/turns/claim" in paths:
            # run every queued turn to its end, so the next claim has to wait for the message
            while (got := await agent.post("/v1/agent/turns/claim", json={"wait_s": 0})) \
                    .status_code == 200:
                turn = got.json()["turn"]["id"]
                assert (await agent.post(f"/v1/agent/turns/{turn}/inbox")).status_code == 200
                assert (await agent.post(f"/v1/agent/turns/{turn}/finish")).status_code == 200
            assert got.status_code == 204, got.text
            claim = asyncio.create_task(agent.post("/v1/agent/turns/claim",
                                                   json={"wait_s": 20, "runtime_id": "probe"}))
            await asyncio.sleep(0.5)  # let the claim start waiting (there is no signal for it)
            # a fresh thread: the load's runtime may have left a turn running elsewhere
            fresh = (await user.post("/v1/threads", json={"title": "probe"})).json()["id"]
            resp = await user.post(f"/v1/threads/{fresh}/messages", json={"body": "hello"})
            assert resp.status_code == 201, resp.text
            woken = await claim
            assert woken.status_code == 200, woken.text
            checks["claims_woken"] = 1
        before = receiver.total
        load = Workload(server.base_url, party, threads, paths, random.Random(7), max_cards=2)
        await load.card_worker()
        # and one card nobody answers: the load's cards are answered at once, and an answer
        # that beats its notify cancels it (nothing was shown, nothing to send)
        assert await load.post_card()
        await load.close()
        assert load.out.posted_calls == 3, load.out.statuses
        assert not load.out.server_errors, load.out.server_errors
        async with asyncio.timeout(30):
            await receiver.wait_total(before + 1)
        checks["pushes_after_fault"] = 1
    return checks


async def _watched(watcher: Watcher, outcomes: list[Outcomes]) -> int:
    """Every row the server confirmed reached the reconnecting WebSocket client."""
    confirmed = {i for o in outcomes for i in o.message_ids}
    async with asyncio.timeout(60):
        await watcher.wait_seen(confirmed)
    return len(confirmed)


async def _load_with_faults(server: ServerProcess, party: Party, threads: list[str],
                            paths: set[str], fault: Any, n_faults: int,
                            rng: random.Random) -> tuple[Outcomes, int]:
    """Run the workload and inject ``n_faults`` faults while it runs."""
    load = Workload(server.base_url, party, threads, paths, rng, max_cards=1000)
    injected = 0

    async def faulter() -> None:
        nonlocal injected
        for _ in range(n_faults):
            await asyncio.sleep(rng.uniform(0.2, 0.8))
            await fault()
            injected += 1
        load.stop.set()

    jobs = [load.card_worker() for _ in range(4)] + [load.message_worker(),
                                                    load.runtime_worker()]
    try:
        await asyncio.gather(faulter(), *jobs)
    finally:
        await load.close()
    return load.out, injected


@pytest.mark.slow
@pytest.mark.timeout(180 * scale())
async def test_terminated_connections_give_503_then_recover(database_url: str,
                                                            tmp_path: Path) -> None:
    receiver = await Receiver().start()
    (party,) = await provision(database_url, "max")
    server = await asyncio.to_thread(start_server, database_url, tmp_path / "serve.log", None,
                                     SERVER_ENV)
    killed = 0

    async def fault() -> None:
        nonlocal killed
        killed += await terminate_backends(database_url)

    try:
        threads = await _setup(server.base_url, party, receiver)
        paths = await _paths(server.base_url)
        watcher = Watcher(server.base_url, party.user_token)
        watching = asyncio.create_task(watcher.run())
        outcomes, injected = await _load_with_faults(server, party, threads, paths, fault,
                                                     8 * scale(), random.Random(11))
        await _unavailable_shape(outcomes)
        await wait_ready(server.base_url, 30)
        checks = await _catches_up(server, party, receiver, threads, paths)
        checks["rows_seen_over_websocket"] = await _watched(watcher, [outcomes])
        checks["websocket_connects"] = watcher.connects
        watching.cancel()
        lost = await lost_acks(database_url, [outcomes])
        report = await check_url(database_url)
    finally:
        server.stop()
        await receiver.stop()
    n503 = sum(n for k, n in outcomes.statuses.items() if k.endswith(":503"))
    record("db_faults", terminate_rounds=injected, backends_terminated=killed,
           requests_under_terminations=outcomes.requests, unavailable_503=n503,
           server_500s=len(outcomes.server_errors), lost_confirmed_writes=len(lost),
           invariant_violations=len(report.violations), **checks)
    print(f"terminate: statuses={dict(sorted(outcomes.statuses.items()))}")
    assert not lost, "\n".join(lost)
    assert not report.violations, str(report)
    assert killed > 0


async def _probe_outage(base_url: str, token: str, threads: list[str]) -> list[httpx.Response]:
    """Requests while PostgreSQL is down: reads, writes, an unknown token, readiness."""
    async with client(base_url, token, timeout=30.0) as user:
        return [await user.get("/v1/threads"),
                await user.get(f"/v1/threads/{threads[0]}/messages"),
                await user.post(f"/v1/threads/{threads[0]}/messages", json={"body": "x"}),
                await user.post("/v1/components/nope:q1/answer", json={"selected": ["a"]}),
                await user.get("/v1/decisions"),
                await user.get("/readyz")]


@pytest.mark.slow
@pytest.mark.timeout(240 * scale())
async def test_postgres_stopped_and_started_under_load(private_cluster: PrivateCluster,
                                                       tmp_path: Path) -> None:
    admin_url = private_cluster.start()
    admin = await connect(admin_url)
    await admin.execute("CREATE DATABASE maxclaw")
    await admin.close()
    url = with_database(admin_url, "maxclaw")
    server = await asyncio.to_thread(start_server, url, tmp_path / "serve.log", None,
                                     SERVER_ENV)  # serve migrates the empty database
    receiver = await Receiver().start()
    rng = random.Random(13)
    outages = 2 * scale()
    during: list[httpx.Response] = []
    recoveries: list[float] = []
    try:
        (party,) = await provision(url, "max")
        threads = await _setup(server.base_url, party, receiver)
        paths = await _paths(server.base_url)
        watcher = Watcher(server.base_url, party.user_token)
        watching = asyncio.create_task(watcher.run())
        all_out: list[Outcomes] = []
        for _ in range(outages):
            async def fault() -> None:
                await asyncio.to_thread(private_cluster.stop_postgres)
                during.extend(await _probe_outage(server.base_url, party.user_token, threads))
                await asyncio.to_thread(private_cluster.start_postgres)

            outcomes, _ = await _load_with_faults(server, party, threads, paths, fault, 1, rng)
            all_out.append(outcomes)
            await _unavailable_shape(outcomes)
            recoveries.append(await wait_ready(server.base_url, 60))
        checks = await _catches_up(server, party, receiver, threads, paths)
        checks["rows_seen_over_websocket"] = await _watched(watcher, all_out)
        checks["websocket_connects"] = watcher.connects
        watching.cancel()
        lost = await lost_acks(url, all_out)
        report = await check_url(url)
    finally:
        server.stop()
        await receiver.stop()
    bad = [f"{r.request.method} {r.request.url.path} → {r.status_code} {r.text[:200]}"
           for r in during if r.status_code != 503 or error_shape_problem(r)
           or r.json()["code"] != "unavailable"]
    record("db_faults", postgres_outages=outages, requests_during_outage=len(during),
           outage_non_503=len(bad), lost_confirmed_writes=len(lost),
           invariant_violations=len(report.violations),
           requests_around_outages=sum(o.requests for o in all_out),
           recovery_ms_max=int(max(recoveries) * 1000), **checks)
    assert not bad, "\n".join(bad)
    assert not lost, "\n".join(lost)
    assert not report.violations, str(report)
