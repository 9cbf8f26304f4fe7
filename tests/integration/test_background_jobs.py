"""Background work is visible (issue 32, item 5): a runtime reports a background job's start
and end as event rows (``source_meta.backgroundJob``); the start wakes nothing, the end wakes
the thread; between the two the job counts in the thread's derived state, which says
"working in the background" while any runs and no turn or question has the floor."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Actor, Harness


async def new_thread(actor: Actor, title: str = "work") -> str:
    resp = await actor.user.post("/v1/threads", json={"title": title})
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


def job(job_id: str, phase: str | None, **more: Any) -> dict[str, Any]:
    report: dict[str, Any] = {"job_id": job_id, **more}
    if phase is not None:
        report["phase"] = phase
    return {"backgroundJob": report}


async def post_event(actor: Actor, thread_id: str, meta: Any,
                     body: str = "a background job") -> Any:
    return await actor.agent.post(f"/v1/agent/threads/{thread_id}/messages",
                                  json={"role": "event", "body": body, "source_meta": meta})


async def report(actor: Actor, thread_id: str, job_id: str, phase: str | None) -> int:
    resp = await post_event(actor, thread_id, job(job_id, phase),
                            f"Background job {job_id} {phase or 'finished'}")
    assert resp.status_code == 201, resp.text
    return int(resp.json()["id"])


async def state(actor: Actor, thread_id: str) -> tuple[str, int, str]:
    """The thread's derived state as one thread and as the list show it (they agree)."""
    one = (await actor.user.get(f"/v1/threads/{thread_id}")).json()
    listed = {t["id"]: t for t in (await actor.user.get("/v1/threads")).json()["threads"]}
    picked = {k: listed[thread_id][k] for k in ("state", "background_jobs", "turn_state")}
    assert picked == {k: one[k] for k in picked}
    return one["state"], one["background_jobs"], one["turn_state"]


async def turns_of(harness: Harness, thread_id: str) -> list[str]:
    async with harness.services.db.connection() as conn:
        rows = await conn.fetch("SELECT status FROM turns WHERE thread_id = $1::uuid ORDER BY id",
                                thread_id)
    return [r["status"] for r in rows]


async def rows_of(harness: Harness, thread_id: str) -> list[Any]:
    async with harness.services.db.connection() as conn:
        return list(await conn.fetch(
            "SELECT id, delivered_at, source_meta FROM messages WHERE thread_id = $1::uuid "
            "ORDER BY id", thread_id))


async def test_a_start_wakes_nothing_an_end_wakes_and_the_state_counts_2_1_0(
        harness: Harness) -> None:
    max_ = await harness.actor("max")
    thread = await new_thread(max_)
    assert await state(max_, thread) == ("idle", 0, "idle")
    first = await report(max_, thread, "job_1", "started")
    await report(max_, thread, "job_2", "started")
    # a start is history, not input: no turn is queued and nothing waits in the inbox
    assert await turns_of(harness, thread) == []
    stored = {r["id"]: r for r in await rows_of(harness, thread)}
    assert stored[first]["delivered_at"] is not None
    assert stored[first]["source_meta"] == job("job_1", "started")
    assert await state(max_, thread) == ("working in the background", 2, "idle")
    # a start posted again (a retry) counts once
    await report(max_, thread, "job_2", "started")
    assert await state(max_, thread) == ("working in the background", 2, "idle")
    assert await turns_of(harness, thread) == []

    # the end wakes the thread, as an event always did; the turn has the floor
    await report(max_, thread, "job_1", "finished")
    assert await turns_of(harness, thread) == ["queued"]
    assert await state(max_, thread) == ("running", 1, "queued")
    claimed = (await max_.agent.post("/v1/agent/turns/claim", json={"wait_s": 0})).json()
    assert claimed["messages"][-1]["content"].endswith("Background job job_1 finished")
    assert claimed["thread"]["background_jobs"] == 1
    done = await max_.agent.post(f"/v1/agent/turns/{claimed['turn']['id']}/finish")
    assert done.json()["requeued"] is False
    # no turn runs, one job does: not done yet
    assert await state(max_, thread) == ("working in the background", 1, "idle")

    # an end without a phase is an end (the shape runtimes posted before starts were told)
    await report(max_, thread, "job_2", None)
    assert await state(max_, thread) == ("running", 0, "queued")
    claimed = (await max_.agent.post("/v1/agent/turns/claim", json={"wait_s": 0})).json()
    await max_.agent.post(f"/v1/agent/turns/{claimed['turn']['id']}/finish")
    assert await state(max_, thread) == ("idle", 0, "idle")
    # an end for a job never started (or told twice) changes nothing but wakes as before
    await report(max_, thread, "job_9", "finished")
    assert (await state(max_, thread))[1] == 0


async def test_a_start_during_a_turn_does_not_requeue_it(harness: Harness) -> None:
    max_ = await harness.actor("max")
    thread = await new_thread(max_)
    assert (await max_.user.post(f"/v1/threads/{thread}/messages",
                                 json={"body": "run the tests"})).status_code == 201
    turn = (await max_.agent.post("/v1/agent/turns/claim", json={"wait_s": 0})).json()["turn"]
    await report(max_, thread, "job_1", "started")
    inbox = await max_.agent.post(f"/v1/agent/turns/{turn['id']}/inbox")
    assert inbox.json() == {"messages": []}  # the runtime that started it knows already
    done = await max_.agent.post(f"/v1/agent/turns/{turn['id']}/finish")
    assert done.json()["requeued"] is False
    assert await turns_of(harness, thread) == ["done"]
    assert await state(max_, thread) == ("working in the background", 1, "idle")


async def test_questions_come_before_background_jobs(harness: Harness) -> None:
    max_ = await harness.actor("max")
    thread = await new_thread(max_)
    await report(max_, thread, "job_1", "started")
    async with harness.services.db.transaction() as conn:  # an unsettled card, as the trigger
        await conn.execute("UPDATE threads SET open_cards = 1 WHERE id = $1::uuid", thread)
    assert await state(max_, thread) == ("waiting for you", 1, "idle")


async def test_another_users_jobs_never_count(harness: Harness) -> None:
    max_ = await harness.actor("max")
    eve = await harness.actor("eve")
    mine = await new_thread(max_)
    theirs = await new_thread(eve)
    await report(eve, theirs, "job_1", "started")
    # eve cannot report into max's thread at all
    intruding = await post_event(eve, mine, job("job_1", "started"))
    assert intruding.status_code == 404, intruding.text
    assert await state(max_, mine) == ("idle", 0, "idle")
    assert await state(eve, theirs) == ("working in the background", 1, "idle")
    # the same job id in max's thread is max's own job; eve's end does not end it
    await report(max_, mine, "job_1", "started")
    await report(eve, theirs, "job_1", "finished")
    assert await state(max_, mine) == ("working in the background", 1, "idle")
    assert (await state(eve, theirs))[1] == 0


@pytest.mark.parametrize(("meta", "loc"), [
    ({"backgroundJob": "job_1"}, []),
    ({"backgroundJob": {"phase": "started"}}, ["job_id"]),
    ({"backgroundJob": {"job_id": "", "phase": "started"}}, ["job_id"]),
    ({"backgroundJob": {"job_id": 3, "phase": "started"}}, ["job_id"]),
    ({"backgroundJob": {"job_id": "job_1", "phase": "begun"}}, ["phase"]),
])
async def test_a_malformed_report_is_422_naming_its_field_and_writes_nothing(
        harness: Harness, meta: dict[str, Any], loc: list[str]) -> None:
    max_ = await harness.actor("max")
    thread = await new_thread(max_)
    await report(max_, thread, "job_0", "started")
    before = await rows_of(harness, thread)
    resp = await post_event(max_, thread, meta)
    assert resp.status_code == 422, resp.text
    errors = resp.json()["data"]["errors"]
    assert errors[0]["loc"] == ["body", "source_meta", "backgroundJob", *loc]
    assert await rows_of(harness, thread) == before
    assert await turns_of(harness, thread) == []
    assert await state(max_, thread) == ("working in the background", 1, "idle")


async def test_a_thread_runs_at_most_64_jobs_and_the_65th_writes_nothing(
        harness: Harness) -> None:
    max_ = await harness.actor("max")
    thread = await new_thread(max_)
    async with harness.services.db.transaction() as conn:  # 64 starts, set at once
        await conn.execute("UPDATE threads SET background_jobs = ARRAY(SELECT 'job_' || n "
                           "FROM generate_series(1, 64) n) WHERE id = $1::uuid", thread)
    before = await rows_of(harness, thread)
    resp = await post_event(max_, thread, job("job_65", "started"))
    assert resp.status_code == 422, resp.text
    assert resp.json()["data"]["errors"][0]["loc"][-1] == "job_id"
    assert "report the finished ones" in resp.json()["message"]
    assert await rows_of(harness, thread) == before
    assert await state(max_, thread) == ("working in the background", 64, "idle")
    await report(max_, thread, "job_1", "finished")  # an end is always taken
    await report(max_, thread, "job_65", "started")
    assert (await state(max_, thread))[1] == 64
