"""Taking an answer back (issue 30, item 1): ``POST /v1/components/{id}/retract`` on
PostgreSQL — the card reopens, the answer never reaches a model, refusals write nothing, and
a retract racing the agent's claim (or inbox) of that answer has exactly one outcome."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from tests.cards import CHOICE, SECRET, execute, new_thread, post_call, post_card
from tests.conftest import Actor, Harness

RACES = 200


async def _tables(h: Harness) -> dict[str, int]:
    """Every table of the schema (from the catalogue) and its row count."""
    async with h.services.db.connection() as conn:
        names = [r["relname"] for r in await conn.fetch(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition"
            " ORDER BY 1")]
        return {n: int(await conn.fetchval(f'SELECT count(*) FROM "{n}"')) for n in names}


async def _state(h: Harness, a: Actor, cid: str) -> dict[str, Any]:
    async with h.services.db.connection() as conn:
        row = await conn.fetchrow(
            "SELECT c.status, c.answer, c.seen_at, c.due_at, c.updated_at,"
            " m.display -> 'states' -> c.id AS mirror,"
            " (SELECT status FROM decisions d WHERE d.id = c.decision_id) AS carrier,"
            " (SELECT turn_state FROM threads t WHERE t.id = c.thread_id) AS turn_state"
            "  FROM message_components c JOIN messages m ON m.id = c.tool_message_id"
            " WHERE c.user_id = $1::uuid AND c.id = $2", a.user_id, cid)
    assert row is not None
    return dict(row)


async def _answer_message(h: Harness, a: Actor, cid: str) -> dict[str, Any]:
    async with h.services.db.connection() as conn:
        row = await conn.fetchrow(
            "SELECT id, body, delivered_at, source_meta FROM messages"
            " WHERE user_id = $1::uuid AND source_meta -> 'componentAnswer' ->> 'componentId' = $2"
            " ORDER BY id DESC LIMIT 1", a.user_id, cid)
    assert row is not None
    return dict(row)


async def _answered(h: Harness, a: Actor, *questions: dict[str, Any],
                    answer: dict[str, Any] | None = None) -> tuple[str, str]:
    tid = await new_thread(a.user)
    _, content = await post_card(a.agent, tid, *(questions or (CHOICE,)))
    cid = str(content["components"][0]["id"])
    resp = await a.user.post(f"/v1/components/{cid}/answer",
                             json=answer or {"selected": ["keep"]})
    assert resp.status_code == 200, resp.text
    return tid, cid


def _claim(a: Actor) -> Any:
    return a.agent.post("/v1/agent/turns/claim", json={"wait_s": 0, "runtime_id": "rt"})


async def test_retract_reopens_the_card_and_the_agent_never_sees_the_answer(
        harness: Harness) -> None:
    a = await harness.actor("max")
    tid, cid = await _answered(harness, a)
    assert (await _state(harness, a, cid))["turn_state"] == "queued"
    resp = await a.user.post(f"/v1/components/{cid}/retract")
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["status"] == "open" and body["answer"] is None and body["due_at"] is not None
    state = await _state(harness, a, cid)
    assert state["status"] == "open" and state["answer"] is None and state["due_at"] is not None
    assert state["mirror"]["status"] == "open" and state["mirror"]["answer"] is None
    assert state["mirror"]["answerable_here"] is True and state["mirror"]["due_at"]
    assert state["carrier"] == "open"  # the carrier reopened
    assert state["turn_state"] == "idle"  # the wake-up that had not started is cancelled
    message = await _answer_message(harness, a, cid)
    assert message["delivered_at"] is not None and "retracted" in message["source_meta"]
    # the timeline still shows it, taken back
    listed = (await a.user.get(f"/v1/threads/{tid}/messages")).json()["messages"]
    assert any((m.get("source_meta") or {}).get("retracted") for m in listed)
    assert (await _claim(a)).status_code == 204  # nothing to run
    # answered again: the agent sees only the second answer
    resp = await a.user.post(f"/v1/components/{cid}/answer", json={"selected": ["drop"]})
    assert resp.status_code == 200, resp.text
    claimed = await _claim(a)
    assert claimed.status_code == 200, claimed.text
    texts = [str(m.get("content")) for m in claimed.json()["messages"]]
    assert any("Remove it now" in t for t in texts), texts
    assert not any("Keep one version" in t and m.get("role") == "user"
                   for t, m in zip(texts, claimed.json()["messages"], strict=True)), texts
    history = (await a.agent.get(f"/v1/agent/threads/{tid}/history")).json()["messages"]
    assert not any("Keep one version" in str(m.get("content")) and m.get("role") == "user"
                   for m in history)


async def test_a_queued_turn_with_other_input_stays(harness: Harness) -> None:
    a = await harness.actor("max")
    tid, cid = await _answered(harness, a)
    resp = await a.user.post(f"/v1/threads/{tid}/messages", json={"body": "and another thing"})
    assert resp.status_code == 201
    assert (await a.user.post(f"/v1/components/{cid}/retract")).status_code == 200
    assert (await _state(harness, a, cid))["turn_state"] == "queued"
    claimed = (await _claim(a)).json()
    assert [m["content"] for m in claimed["input"]] == ["and another thing"]


async def test_a_secret_answer_s_sealed_box_is_destroyed(harness: Harness) -> None:
    a = await harness.actor("max")
    _, cid = await _answered(harness, a, SECRET, answer={"text": "hunter2-deploy"})
    message = await _answer_message(harness, a, cid)
    async with harness.services.db.connection() as conn:
        boxes = "SELECT count(*) FROM message_secrets WHERE message_id = $1"
        assert await conn.fetchval(boxes, message["id"]) == 1
        resp = await a.user.post(f"/v1/components/{cid}/retract")
        assert resp.status_code == 200, resp.text
        assert await conn.fetchval(boxes, message["id"]) == 0
    assert "hunter2" not in resp.text


async def _refused(h: Harness, client: Any, cid: str, status: int, code: str) -> None:
    before = await _tables(h)
    resp = await client.post(f"/v1/components/{cid}/retract")
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert body["code"] == code and body["message"] and "request_id" in body
    assert await _tables(h) == before, f"a refused retract ({code}) wrote a row"


async def test_every_refusal_changes_no_row(harness: Harness) -> None:
    a = await harness.actor("max")
    other = await harness.actor("eve")
    # someone else's card; a card that does not exist
    _, cid = await _answered(harness, a)
    state = await _state(harness, a, cid)
    await _refused(harness, other.user, cid, 404, "not_found")
    await _refused(harness, a.user, "nope:q1", 404, "not_found")
    # an agent token may not retract
    await _refused(harness, a.agent, cid, 403, "forbidden")
    assert await _state(harness, a, cid) == state
    # seen by the model
    assert (await _claim(a)).status_code == 200
    await _refused(harness, a.user, cid, 409, "seen")
    # open (never answered, or already taken back)
    tid = await new_thread(a.user)
    _, content = await post_card(a.agent, tid, CHOICE)
    open_id = str(content["components"][0]["id"])
    await _refused(harness, a.user, open_id, 409, "conflict")
    # withdrawn by the agent
    resp = await a.agent.post(f"/v1/agent/threads/{tid}/messages", json={
        "role": "assistant", "content": None, "tool_calls": [{
            "id": "call_w", "type": "function", "function": {
                "name": "withdraw_question",
                "arguments": {"component_id": open_id, "reason": "not needed"}}}]})
    assert resp.status_code == 201
    resp = await a.agent.post(f"/v1/agent/threads/{tid}/tool-calls/call_w/execute")
    assert resp.status_code == 200, resp.text
    await _refused(harness, a.user, open_id, 409, "withdrawn")
    # settled by Main
    _, content = await post_card(a.agent, tid, CHOICE)
    main_id = str(content["components"][0]["id"])
    assert (await a.user.post(f"/v1/components/{main_id}/to-main")).status_code == 200
    resp = await a.agent.post(f"/v1/agent/threads/{a.main_thread_id}/messages", json={
        "role": "assistant", "content": None, "tool_calls": [{
            "id": "call_m", "type": "function", "function": {
                "name": "answer_for_max", "arguments": {
                    "component_id": main_id, "selected": ["keep"], "reason": "usual"}}}]})
    assert resp.status_code == 201, resp.text
    resp = await a.agent.post(f"/v1/agent/threads/{a.main_thread_id}/tool-calls/call_m/execute")
    assert resp.status_code == 200, resp.text
    await _refused(harness, a.user, main_id, 409, "settled")
    # past the window
    _, late = await _answered(harness, a)
    harness.services.components.retractions.window = timedelta(0)
    await _refused(harness, a.user, late, 409, "too_late")


async def _race_once(h: Harness, a: Actor, via_inbox: bool) -> str:
    """One retract against one delivery of the same answer; which one won."""
    tid = await new_thread(a.user)
    turn_id = None
    if via_inbox:  # a running turn: the answer reaches it through the inbox
        assert (await a.user.post(f"/v1/threads/{tid}/messages",
                                  json={"body": "start"})).status_code == 201
        claimed = await a.agent.post("/v1/agent/turns/claim",
                                     json={"wait_s": 0, "runtime_id": "rt", "thread_ids": [tid]})
        assert claimed.status_code == 200, claimed.text
        turn_id = claimed.json()["turn"]["id"]
    _, content = await post_card(a.agent, tid, CHOICE)
    cid = str(content["components"][0]["id"])
    assert (await a.user.post(f"/v1/components/{cid}/answer",
                              json={"selected": ["keep"]})).status_code == 200
    deliver = (a.agent.post(f"/v1/agent/turns/{turn_id}/inbox") if via_inbox else _claim(a))
    retracted, delivered = await asyncio.gather(
        a.user.post(f"/v1/components/{cid}/retract"), deliver)
    handed = delivered.status_code == 200 and any(
        "Keep one version" in str(m.get("content")) and m.get("role") == "user"
        for m in delivered.json()["messages"])
    state = await _state(h, a, cid)
    if retracted.status_code == 200:
        assert not handed, "the retract won, yet the model was handed the answer"
        assert state["status"] == "open" and state["seen_at"] is None
        return "retracted"
    assert retracted.status_code == 409 and retracted.json()["code"] == "seen", retracted.text
    assert handed, "the retract was refused as seen, yet the model was not handed the answer"
    assert state["status"] == "answered" and state["seen_at"] is not None
    if via_inbox:
        assert (await a.agent.post(f"/v1/agent/turns/{turn_id}/finish")).status_code == 200
    else:
        turn = delivered.json()["turn"]["id"]
        assert (await a.agent.post(f"/v1/agent/turns/{turn}/finish")).status_code == 200
    return "seen"


async def test_retract_racing_the_claim_has_one_outcome(harness: Harness) -> None:
    a = await harness.actor("max")
    outcomes = [await _race_once(harness, a, via_inbox=False) for _ in range(RACES)]
    print({o: outcomes.count(o) for o in set(outcomes)})


async def test_retract_racing_the_inbox_has_one_outcome(harness: Harness) -> None:
    a = await harness.actor("max")
    outcomes = [await _race_once(harness, a, via_inbox=True) for _ in range(RACES)]
    print({o: outcomes.count(o) for o in set(outcomes)})


async def test_main_s_read_thread_leaves_a_taken_back_answer_out(harness: Harness) -> None:
    a = await harness.actor("max")
    tid, cid = await _answered(harness, a, answer={"selected": ["keep"],
                                                    "text": "mis-tap-marker"})
    assert (await a.user.post(f"/v1/components/{cid}/retract")).status_code == 200
    # another card of the thread handed to Main opens the thread to read_thread
    _, content = await post_card(a.agent, tid, CHOICE)
    other = str(content["components"][0]["id"])
    assert (await a.user.post(f"/v1/components/{other}/to-main")).status_code == 200
    call = "call_read_taken_back"
    resp = await a.agent.post(f"/v1/agent/threads/{a.main_thread_id}/messages", json={
        "role": "assistant", "content": None, "tool_calls": [{
            "id": call, "type": "function", "function": {
                "name": "read_thread", "arguments": {"thread_id": tid}}}]})
    assert resp.status_code == 201, resp.text
    resp = await a.agent.post(f"/v1/agent/threads/{a.main_thread_id}/tool-calls/{call}/execute")
    assert resp.status_code == 200, resp.text
    assert "Keep the old field" in resp.text  # it read the thread
    assert "mis-tap-marker" not in resp.text


async def _race_main_once(h: Harness, a: Actor, tid: str) -> str:
    """Main holds the card. Max answers it from the panel and at once takes it back, while
    Main answers it for him: Main's answer and Max's own exclude each other, so a round ends
    either with Max's answer taken back (the card open, Main refused, no live answer message)
    or with Main's answer standing (Max's answer and his retract refused; revoke is his way)."""
    _, content = await post_card(a.agent, tid, CHOICE)
    cid = str(content["components"][0]["id"])
    assert (await a.user.post(f"/v1/components/{cid}/to-main")).status_code == 200
    decision_id = (await a.user.get(f"/v1/components/{cid}")).json()["decision_id"]
    m_call = await post_call(a.agent, a.main_thread_id, "answer_for_max",
                             {"component_id": cid, "selected": ["drop"], "reason": "usual"})

    async def max_answers_then_takes_back() -> tuple[int, int]:
        settled = await a.user.post(f"/v1/decisions/{decision_id}/settle",
                                    json={"selected": ["keep"]})
        retracted = await a.user.post(f"/v1/components/{cid}/retract")
        return settled.status_code, retracted.status_code

    (settled, retracted), main = await asyncio.gather(
        max_answers_then_takes_back(), execute(a.agent, a.main_thread_id, m_call))
    state = await _state(h, a, cid)
    async with h.services.db.connection() as conn:
        live = await conn.fetchval(
            "SELECT count(*) FROM messages WHERE user_id = $1::uuid AND thread_id = $2::uuid"
            " AND source_meta -> 'componentAnswer' ->> 'componentId' = $3"
            " AND NOT source_meta ? 'retracted'",
            a.user_id, tid, cid)
    if settled == 200:
        assert retracted == 200, "Max's own answer, unseen, within the window: taken back"
        assert main.status_code == 409, main.text  # refused, its tool row written
        assert state["status"] == "open" and state["mirror"]["answer"] is None
        assert live == 0, "a taken-back answer is not live"
        return "max-took-back"
    assert settled == 409 and retracted == 409, (settled, retracted)
    assert main.status_code == 200, main.text
    assert state["status"] == "main-answered" and live == 1
    return "main-answered"


async def test_retract_racing_main_has_one_outcome(harness: Harness) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    outcomes = [await _race_main_once(harness, a, tid) for _ in range(RACES)]
    print({o: outcomes.count(o) for o in set(outcomes)})
