"""Max's Stop (issue 30, item 2): ``POST /v1/threads/{id}/turn/stop`` on PostgreSQL — the
running turn ends ``stopped``, every later write of it is ``409 turn_stopped``, waiting input
stays queued for the next turn, open cards stay open; a stop racing a write has one outcome."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.cards import CHOICE, new_thread, post_card
from tests.conftest import Actor, Harness

RACES = 200


async def _running(a: Actor) -> tuple[str, int]:
    """A thread with a running turn (claimed by the agent)."""
    tid = await new_thread(a.user)
    assert (await a.user.post(f"/v1/threads/{tid}/messages",
                              json={"body": "go"})).status_code == 201
    claimed = await a.agent.post("/v1/agent/turns/claim",
                                 json={"wait_s": 0, "runtime_id": "rt", "thread_ids": [tid]})
    assert claimed.status_code == 200, claimed.text
    return tid, int(claimed.json()["turn"]["id"])


def _assistant(a: Actor, tid: str, turn_id: int, text: str) -> Any:
    return a.agent.post(f"/v1/agent/threads/{tid}/messages",
                        json={"role": "assistant", "content": text, "turn_id": turn_id})


async def _turn(h: Harness, turn_id: int) -> dict[str, Any]:
    async with h.services.db.connection() as conn:
        row = await conn.fetchrow(
            "SELECT t.status, t.finished_at, h.turn_state FROM turns t"
            " JOIN threads h ON h.user_id = t.user_id AND h.id = t.thread_id WHERE t.id = $1",
            turn_id)
    assert row is not None
    return dict(row)


async def test_stop_fences_the_turn_and_keeps_input_and_cards(harness: Harness) -> None:
    a = await harness.actor("max")
    tid, turn_id = await _running(a)
    _, content = await post_card(a.agent, tid, CHOICE)
    cid = content["components"][0]["id"]
    resp = await a.user.post(f"/v1/threads/{tid}/turn/stop")
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert (body["thread_id"], body["turn_id"], body["status"]) == (tid, turn_id, "stopped")
    state = await _turn(harness, turn_id)
    assert state["status"] == "stopped" and state["turn_state"] == "idle"
    # every later write of the turn is refused with the code the runtime understands
    for resp in [await _assistant(a, tid, turn_id, "still here"),
                 *[await a.agent.post(f"/v1/agent/turns/{turn_id}/{p}")
                   for p in ("heartbeat", "inbox", "finish")]]:
        assert resp.status_code == 409, resp.text
        assert resp.json()["code"] == "turn_stopped", resp.text
        assert resp.json()["data"] == {"status": "stopped"}
    # the open card stays open; stopping again is a conflict
    assert (await a.user.get(f"/v1/components/{cid}")).json()["status"] == "open"
    again = await a.user.post(f"/v1/threads/{tid}/turn/stop")
    assert again.status_code == 409 and again.json()["code"] == "conflict"
    # Max's next message starts a new turn, handed everything that waited
    assert (await a.user.post(f"/v1/threads/{tid}/messages",
                              json={"body": "try again"})).status_code == 201
    claimed = await a.agent.post("/v1/agent/turns/claim",
                                 json={"wait_s": 0, "runtime_id": "rt", "thread_ids": [tid]})
    assert claimed.status_code == 200
    assert claimed.json()["turn"]["id"] != turn_id
    assert [m["content"] for m in claimed.json()["input"]] == ["try again"]


async def test_input_waiting_at_the_stop_stays_queued(harness: Harness) -> None:
    a = await harness.actor("max")
    tid, turn_id = await _running(a)
    assert (await a.user.post(f"/v1/threads/{tid}/messages",
                              json={"body": "waiting"})).status_code == 201
    assert (await a.user.post(f"/v1/threads/{tid}/turn/stop")).status_code == 200
    assert (await _turn(harness, turn_id))["turn_state"] == "idle"  # nothing started by itself
    assert (await a.user.post(f"/v1/threads/{tid}/messages",
                              json={"body": "now"})).status_code == 201
    claimed = (await a.agent.post("/v1/agent/turns/claim", json={
        "wait_s": 0, "runtime_id": "rt", "thread_ids": [tid]})).json()
    assert [m["content"] for m in claimed["input"]] == ["waiting", "now"]


async def test_stop_refusals(harness: Harness) -> None:
    a = await harness.actor("max")
    other = await harness.actor("eve")
    tid, turn_id = await _running(a)
    for client, path, status, code in [
            (other.user, f"/v1/threads/{tid}/turn/stop", 404, "not_found"),
            (a.user, "/v1/threads/not-a-uuid/turn/stop", 404, "not_found"),
            (a.agent, f"/v1/threads/{tid}/turn/stop", 403, "forbidden")]:
        resp = await client.post(path)
        assert (resp.status_code, resp.json()["code"]) == (status, code), resp.text
    assert (await _turn(harness, turn_id))["status"] == "running"
    idle = await new_thread(a.user)
    resp = await a.user.post(f"/v1/threads/{idle}/turn/stop")
    assert (resp.status_code, resp.json()["code"]) == (409, "conflict")


async def test_stop_racing_a_write_has_one_outcome(harness: Harness) -> None:
    """Each time: the write committed before the stop (its row is there, then the turn is
    stopped) or it was refused ``turn_stopped`` and wrote nothing."""
    a = await harness.actor("max")
    outcomes = []
    for i in range(RACES):
        tid, turn_id = await _running(a)
        stop, write = await asyncio.gather(a.user.post(f"/v1/threads/{tid}/turn/stop"),
                                           _assistant(a, tid, turn_id, f"step {i}"))
        assert stop.status_code == 200, stop.text
        async with harness.services.db.connection() as conn:
            rows = await conn.fetchval(
                "SELECT count(*) FROM messages WHERE thread_id = $1::uuid AND role = 'assistant'"
                " AND turn_id = $2", tid, turn_id)
        assert (await _turn(harness, turn_id))["status"] == "stopped"
        if write.status_code == 201:
            assert rows == 1
            outcomes.append("written")
        else:
            assert (write.status_code, write.json()["code"]) == (409, "turn_stopped"), write.text
            assert rows == 0
            outcomes.append("refused")
    print({o: outcomes.count(o) for o in set(outcomes)})
