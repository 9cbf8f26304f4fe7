"""Runtime leases (issue 32, item 5, made robust): a runtime takes a lease and heartbeats it; the
background jobs it reports started under the lease end as lost when the lease lapses — a
``jobLost`` event on the thread and a queued turn, once, whatever ticks race — so a thread whose
runtime died stops saying "working in the background". The clock is moved by hand."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

import pytest

from maxclaw.clock import FixedClock
from tests.conftest import Actor, Harness
from tests.integration.test_background_jobs import job, new_thread, post_event, state, turns_of


async def take_lease(actor: Actor, runtime: str = "runtime-1") -> dict[str, Any]:
    resp = await actor.agent.post("/v1/agent/leases", json={"runtime": runtime})
    assert resp.status_code == 201, resp.text
    return dict(resp.json())


async def start_job(actor: Actor, thread_id: str, job_id: str, lease_id: str | None) -> Any:
    more = {"lease_id": lease_id} if lease_id is not None else {}
    return await post_event(actor, thread_id, job(job_id, "started", **more),
                            f"Background job {job_id} started")


def move_past_leases(harness: Harness) -> None:
    """Every runtime lease handed out so far has run out."""
    leases = harness.services.leases
    leases.clock = FixedClock(leases.clock.now() + leases.lease + timedelta(seconds=1))


async def lost_events(harness: Harness, thread_id: str) -> list[Any]:
    async with harness.services.db.connection() as conn:
        return [r["source_meta"] for r in await conn.fetch(
            "SELECT source_meta FROM messages WHERE thread_id = $1::uuid"
            " AND source_meta ? 'jobLost' ORDER BY id", thread_id)]


async def test_a_lease_is_taken_and_heartbeats_move_it_on(harness: Harness) -> None:
    max_ = await harness.actor("max")
    lease = await take_lease(max_)
    assert lease["status"] == "active" and lease["runtime"] == "runtime-1"
    assert lease["lease_s"] == harness.services.leases.lease.total_seconds()
    uuid.UUID(lease["id"])
    leases = harness.services.leases
    leases.clock = FixedClock(leases.clock.now() + timedelta(seconds=5))
    beat = await max_.agent.post(f"/v1/agent/leases/{lease['id']}/heartbeat")
    assert beat.status_code == 200, beat.text
    assert beat.json()["id"] == lease["id"]
    assert beat.json()["lease_until"] > lease["lease_until"]
    # nothing lapses while heartbeats keep it ahead
    assert await leases.lapse_expired() == 0


async def test_a_lapsed_lease_ends_its_jobs_as_lost_and_queues_one_turn(
        harness: Harness) -> None:
    max_ = await harness.actor("max")
    thread = await new_thread(max_)
    other = await new_thread(max_, "other")
    lease = await take_lease(max_)
    for job_id in ("job_1", "job_2"):
        assert (await start_job(max_, thread, job_id, lease["id"])).status_code == 201
    assert (await start_job(max_, other, "job_1", lease["id"])).status_code == 201
    # a job without a lease (an older runtime) is not the lease's to end
    assert (await start_job(max_, thread, "job_3", None)).status_code == 201
    # a job whose end was reported leaves the lease
    assert (await post_event(max_, other, job("job_1", "finished"))).status_code == 201
    claimed = (await max_.agent.post("/v1/agent/turns/claim", json={"wait_s": 0})).json()
    await max_.agent.post(f"/v1/agent/turns/{claimed['turn']['id']}/finish")
    assert await state(max_, thread) == ("working in the background", 3, "idle")
    assert await state(max_, other) == ("idle", 0, "idle")

    assert await harness.services.leases.lapse_expired() == 0  # not yet run out
    move_past_leases(harness)
    assert await harness.services.leases.lapse_expired() == 1
    assert await harness.services.leases.lapse_expired() == 0  # once
    lost = await lost_events(harness, thread)
    assert sorted(m["jobLost"]["job_id"] for m in lost) == ["job_1", "job_2"]
    assert {m["jobLost"]["lease_id"] for m in lost} == {lease["id"]}
    assert await lost_events(harness, other) == []
    # the lost jobs stop counting; the unleased one still runs; the agent is woken once
    assert await turns_of(harness, thread) == ["queued"]
    assert await state(max_, thread) == ("running", 1, "queued")
    claimed = (await max_.agent.post("/v1/agent/turns/claim", json={"wait_s": 0})).json()
    assert claimed["thread"]["id"] == thread
    said = [m["content"] for m in claimed["input"]]
    assert len(said) == 2 and all("was lost" in s for s in said), said
    await max_.agent.post(f"/v1/agent/turns/{claimed['turn']['id']}/finish")
    assert await state(max_, thread) == ("working in the background", 1, "idle")

    # the lapsed lease: heartbeat 409, a new start under it 409, both writing nothing
    beat = await max_.agent.post(f"/v1/agent/leases/{lease['id']}/heartbeat")
    assert beat.status_code == 409, beat.text
    assert beat.json()["code"] == "conflict" and beat.json()["data"]["status"] == "lapsed"
    late = await start_job(max_, thread, "job_4", lease["id"])
    assert late.status_code == 409, late.text
    assert (await state(max_, thread))[1] == 1


async def test_two_racing_ticks_end_each_job_once(harness: Harness) -> None:
    max_ = await harness.actor("max")
    threads = [await new_thread(max_, f"t{i}") for i in range(4)]
    leases = [await take_lease(max_, f"runtime-{i}") for i in range(3)]
    for i, thread in enumerate(threads):
        for n, lease in enumerate(leases):
            assert (await start_job(max_, thread, f"job_{i}_{n}",
                                    lease["id"])).status_code == 201
    move_past_leases(harness)
    service = harness.services.leases
    counts = await asyncio.gather(service.lapse_expired(limit=2), service.lapse_expired(limit=2),
                                  service.lapse_expired(limit=2))
    assert sum(counts) + await service.lapse_expired() == 3
    for i, thread in enumerate(threads):
        lost = await lost_events(harness, thread)
        assert sorted(m["jobLost"]["job_id"] for m in lost) == [f"job_{i}_{n}" for n in range(3)]
        assert await turns_of(harness, thread) == ["queued"]
        assert (await state(max_, thread))[1] == 0


async def test_a_late_heartbeat_lapses_the_lease_itself(harness: Harness) -> None:
    max_ = await harness.actor("max")
    thread = await new_thread(max_)
    lease = await take_lease(max_)
    assert (await start_job(max_, thread, "job_1", lease["id"])).status_code == 201
    move_past_leases(harness)
    beat = await max_.agent.post(f"/v1/agent/leases/{lease['id']}/heartbeat")
    assert beat.status_code == 409, beat.text
    assert [m["jobLost"]["job_id"] for m in await lost_events(harness, thread)] == ["job_1"]
    assert await harness.services.leases.lapse_expired() == 0  # nothing left for the tick
    assert await state(max_, thread) == ("running", 0, "queued")


async def test_another_users_lease_is_404(harness: Harness) -> None:
    max_ = await harness.actor("max")
    eve = await harness.actor("eve")
    theirs = await take_lease(eve)
    thread = await new_thread(max_)
    beat = await max_.agent.post(f"/v1/agent/leases/{theirs['id']}/heartbeat")
    assert beat.status_code == 404, beat.text
    assert beat.json()["code"] == "not_found"
    used = await start_job(max_, thread, "job_1", theirs["id"])
    assert used.status_code == 404, used.text
    assert await state(max_, thread) == ("idle", 0, "idle")
    # a user token is refused on agent endpoints
    assert (await max_.user.post("/v1/agent/leases",
                                 json={"runtime": "x"})).status_code == 403


@pytest.mark.parametrize("lease_id", ["nope", str(uuid.uuid4())], ids=["malformed", "unknown"])
async def test_an_unknown_or_malformed_lease_is_404(harness: Harness, lease_id: str) -> None:
    max_ = await harness.actor("max")
    beat = await max_.agent.post(f"/v1/agent/leases/{lease_id}/heartbeat")
    assert beat.status_code == 404, beat.text
    assert beat.json()["code"] == "not_found"


@pytest.mark.parametrize(("body", "loc"), [
    ({}, ["body", "runtime"]),
    ({"runtime": ""}, ["body", "runtime"]),
    ({"runtime": 3}, ["body", "runtime"]),
    ({"runtime": "x" * 201}, ["body", "runtime"]),
])
async def test_a_bad_lease_request_is_422_naming_the_field(
        harness: Harness, body: dict[str, Any], loc: list[str]) -> None:
    max_ = await harness.actor("max")
    resp = await max_.agent.post("/v1/agent/leases", json=body)
    assert resp.status_code == 422, resp.text
    assert resp.json()["code"] == "invalid"
    assert resp.json()["data"]["errors"][0]["loc"] == loc


@pytest.mark.parametrize("lease_id", ["not-a-uuid", 7, True])
async def test_a_malformed_lease_id_on_a_start_is_422(harness: Harness, lease_id: Any) -> None:
    max_ = await harness.actor("max")
    thread = await new_thread(max_)
    resp = await start_job(max_, thread, "job_1", lease_id)
    assert resp.status_code == 422, resp.text
    assert resp.json()["data"]["errors"][0]["loc"] == [
        "body", "source_meta", "backgroundJob", "lease_id"]
    assert await state(max_, thread) == ("idle", 0, "idle")


async def test_a_runtime_cannot_write_a_job_lost_event(harness: Harness) -> None:
    max_ = await harness.actor("max")
    thread = await new_thread(max_)
    resp = await post_event(max_, thread, {"jobLost": {"job_id": "job_1"}})
    assert resp.status_code == 422, resp.text
