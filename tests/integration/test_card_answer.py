"""A whole card answered at once (issue 16, item 7), the time points and the thread's derived
state (item 8), on PostgreSQL: ``POST /v1/cards/{tool_call_id}/answer``."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.cards import CHOICE, SECRET, TEXT, execute, new_thread, post_call, post_card
from tests.conftest import Actor, Harness

CHOICE_B = {"id": "q5", "kind": "choice", "question": "Which database?",
            "options": [{"id": "pg", "label": "PostgreSQL"}, {"id": "my", "label": "MySQL"}]}
PLANTED = "tok-6b1f0c-planted-never-echo"


async def count(h: Harness, sql: str, *args: Any) -> int:
    async with h.services.db.connection() as conn:
        return int(await conn.fetchval(sql, *args))


async def answer_messages(h: Harness, tid: str) -> list[dict[str, Any]]:
    async with h.services.db.connection() as conn:
        rows = await conn.fetch(
            "SELECT id, body, source_meta, sensitive FROM messages WHERE thread_id = $1::uuid"
            " AND role = 'user' AND (source_meta ? 'componentAnswer'"
            " OR source_meta ? 'cardAnswer') ORDER BY id", tid)
    return [dict(r) for r in rows]


def answered_ids(meta: dict[str, Any]) -> list[str]:
    if "cardAnswer" in meta:
        return [a["componentId"] for a in meta["cardAnswer"]["answers"]]
    return [meta["componentAnswer"]["componentId"]]


async def queued_turns(h: Harness, tid: str) -> int:
    return await count(h, "SELECT count(*) FROM turns WHERE thread_id = $1::uuid", tid)


async def thread(a: Actor, tid: str) -> dict[str, Any]:
    return dict((await a.user.get(f"/v1/threads/{tid}")).json())


async def test_a_whole_card_lands_as_one_message_and_one_wake_up(harness: Harness) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    call_id, _ = await post_card(a.agent, tid, CHOICE, TEXT, CHOICE_B)
    assert (await thread(a, tid))["state"] == "waiting for you"
    assert (await thread(a, tid))["open_cards"] == 3
    resp = await a.user.post(f"/v1/cards/{call_id}/answer", json={"answers": {
        "q1": {"selected": ["drop"], "text": "no users left"},
        "q2": {"text": "Renamed status"},
        "q5": {"selected": ["pg"]}}})
    assert resp.status_code == 200, resp.text
    comps = resp.json()["components"]
    assert {c: comps[c]["status"] for c in comps} == {
        f"{call_id}:q1": "answered", f"{call_id}:q2": "answered", f"{call_id}:q5": "answered"}
    messages = await answer_messages(harness, tid)
    assert len(messages) == 1
    body = messages[0]["body"]
    assert 'Max answered 3 questions of the card "Rename the status field"' in body
    assert "Chose: Remove it now" in body and "Note: no users left" in body
    assert "Answer: Renamed status" in body and "Chose: PostgreSQL" in body
    assert answered_ids(messages[0]["source_meta"]) == sorted(comps)
    assert await queued_turns(harness, tid) == 1
    # each carrier settled with its own answer; the card's mirror agrees
    decisions = (await a.user.get("/v1/decisions?status=all")).json()["decisions"]
    mine = {d["component_id"]: d for d in decisions if d["thread_id"] == tid}
    assert all(d["status"] == "settled" and d["settled_via"] == "card" for d in mine.values())
    tool_row = next(m for m in (await a.user.get(f"/v1/threads/{tid}/messages")).json()[
        "messages"] if m["role"] == "tool" and m["tool_call_id"] == call_id)
    assert {s["status"] for s in tool_row["display"]["states"].values()} == {"answered"}
    state = await thread(a, tid)
    assert state["open_cards"] == 0 and state["state"] == "running"  # the answer woke it
    # a retry of the same request (its response lost) writes nothing and reports the answers
    again = await a.user.post(f"/v1/cards/{call_id}/answer", json={"answers": {
        "q1": {"selected": ["drop"], "text": "no users left"},
        "q2": {"text": "Renamed status"}, "q5": {"selected": ["pg"]}}})
    assert again.status_code == 200
    assert all(c.get("replayed") for c in again.json()["components"].values()), again.text
    # a different answer to a settled question is refused per question
    other = await a.user.post(f"/v1/cards/{call_id}/answer",
                              json={"answers": {"q5": {"selected": ["my"]}}})
    assert other.json()["components"][f"{call_id}:q5"]["error"]["code"] == "settled"
    assert len(await answer_messages(harness, tid)) == 1


async def test_one_settled_elsewhere_is_reported_and_the_rest_land(harness: Harness) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    call_id, _ = await post_card(a.agent, tid, CHOICE, TEXT, CHOICE_B)
    w_call = await post_call(a.agent, tid, "withdraw_question",
                             {"component_id": f"{call_id}:q5", "reason": "moot"})
    assert (await execute(a.agent, tid, w_call)).status_code == 200
    single = await a.user.post(f"/v1/components/{call_id}:q2/answer", json={"text": "first"})
    assert single.status_code == 200
    resp = await a.user.post(f"/v1/cards/{call_id}/answer", json={"answers": {
        "q1": {"selected": ["keep"]}, "q2": {"text": "second"}, "q5": {"selected": ["pg"]}}})
    assert resp.status_code == 200, resp.text
    comps = resp.json()["components"]
    assert comps[f"{call_id}:q1"]["status"] == "answered"
    assert comps[f"{call_id}:q2"]["error"]["code"] == "settled"
    assert comps[f"{call_id}:q5"]["error"]["code"] == "withdrawn"
    messages = await answer_messages(harness, tid)
    # the single answer's message, then one that reads exactly like a single answer (q1 only)
    assert [answered_ids(m["source_meta"]) for m in messages] == [[f"{call_id}:q2"],
                                                                  [f"{call_id}:q1"]]
    assert "componentAnswer" in messages[1]["source_meta"]


async def test_bad_input_is_refused_with_its_field_path_and_writes_nothing(
        harness: Harness) -> None:
    a = await harness.actor("max")
    b = await harness.actor("eve")
    tid = await new_thread(a.user)
    call_id, _ = await post_card(a.agent, tid, CHOICE, TEXT)
    before = await count(harness, "SELECT count(*) FROM messages")
    audit = await count(harness, "SELECT count(*) FROM component_audit")
    cases: list[tuple[Any, int, list[Any] | None]] = [
        ({"answers": {}}, 422, ["body", "answers"]),
        ({"answers": None}, 422, ["body", "answers"]),
        ({"answers": ["q1"]}, 422, ["body", "answers"]),
        ({"answers": {"q9": {"selected": ["keep"]}}}, 422, ["body", "answers", "q9"]),
        ({"answers": {"q1": {"selected": ["nope"]}, "q2": {"text": "x"}}}, 422,
         ["body", "answers", "q1", "selected"]),
        ({"answers": {"q1": {"selected": ["keep"]}, "q2": {"text": 5}}}, 422,
         ["body", "answers", "q2", "text"]),
        ({"answers": {"q1": "keep"}}, 422, ["body", "answers", "q1"]),
        ({"answers": {"q1": {"selected": ["keep"], "extra": 1}}}, 422, ["body", "answers", "q1"]),
    ]
    for body, status, loc in cases:
        resp = await a.user.post(f"/v1/cards/{call_id}/answer", json=body)
        assert resp.status_code == status, (body, resp.text)
        assert resp.json()["code"] == "invalid"
        assert loc in [e["loc"] for e in resp.json()["data"]["errors"]], (body, resp.text)
    # another user's card and an unknown card are 404, never 403
    for client, path in ((b.user, f"/v1/cards/{call_id}/answer"),
                         (a.user, "/v1/cards/call_nope/answer")):
        resp = await client.post(path, json={"answers": {"q1": {"selected": ["keep"]}}})
        assert resp.status_code == 404, resp.text
    # an agent token is the wrong role
    assert (await a.agent.post(f"/v1/cards/{call_id}/answer", json={
        "answers": {"q1": {"selected": ["keep"]}}})).status_code == 403
    assert await count(harness, "SELECT count(*) FROM messages") == before
    assert await count(harness, "SELECT count(*) FROM component_audit") == audit


async def test_secrets_of_a_whole_card_reach_only_the_model(harness: Harness) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    call_id, _ = await post_card(a.agent, tid, TEXT, SECRET)
    resp = await a.user.post(f"/v1/cards/{call_id}/answer", json={"answers": {
        "q2": {"text": "see notes"}, "q3": {"text": PLANTED}}})
    assert resp.status_code == 200, resp.text
    assert PLANTED not in resp.text
    (message,) = await answer_messages(harness, tid)
    assert message["sensitive"] and PLANTED not in (message["body"] or "")
    listed = (await a.user.get(f"/v1/threads/{tid}/messages")).text
    assert PLANTED not in listed
    async with harness.services.db.connection() as conn:
        for table in ("messages", "message_components", "decisions", "push_outbox"):
            dump = await conn.fetchval(f"SELECT coalesce(string_agg(t::text, ''), '')"
                                       f" FROM {table} t")
            assert PLANTED not in dump, table
    claim = await a.agent.post("/v1/agent/turns/claim", json={"wait_s": 0})
    assert claim.status_code == 200, claim.text
    assert f"Secret answer: {PLANTED}" in claim.text and "Answer: see notes" in claim.text


async def test_seen_at_is_mirrored_live_and_cleared_by_a_revoke(harness: Harness) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    call_id, _ = await post_card(a.agent, tid, CHOICE)
    cid = f"{call_id}:q1"

    async def state() -> dict[str, Any]:
        rows = (await a.user.get(f"/v1/threads/{tid}/messages")).json()["messages"]
        row = next(m for m in rows if m["role"] == "tool" and m["tool_call_id"] == call_id)
        return dict(row["display"]["states"][cid])

    assert (await state())["seen_at"] is None
    assert (await a.user.post(f"/v1/components/{cid}/to-main")).status_code == 200
    m_call = await post_call(a.agent, a.main_thread_id, "answer_for_max",
                             {"component_id": cid, "selected": ["keep"], "reason": "usual"})
    assert (await execute(a.agent, a.main_thread_id, m_call)).status_code == 200
    # the model is handed the answer (the inbox of an agent that runs no turns)
    inbox = await a.agent.post(f"/v1/agent/threads/{tid}/inbox")
    assert inbox.status_code == 200 and "Main answered" in inbox.text, inbox.text
    seen = (await state())["seen_at"]
    component = (await a.user.get(f"/v1/components/{cid}")).json()
    assert seen is not None and seen == component["seen_at"]
    assert (await a.user.post(f"/v1/components/{cid}/revoke")).status_code == 200
    assert (await state())["seen_at"] is None
    assert (await a.user.get(f"/v1/components/{cid}")).json()["seen_at"] is None
    assert (await a.user.post(f"/v1/components/{cid}/answer",
                              json={"selected": ["drop"]})).status_code == 200
    after = (await a.user.get(f"/v1/components/{cid}")).json()
    assert after["seen_at"] is None and after["answered_at"] is not None


async def test_thread_state_follows_turns_and_cards(harness: Harness) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    assert (await thread(a, tid))["state"] == "idle"
    assert (await a.user.post(f"/v1/threads/{tid}/messages", json={"body": "go"})
            ).status_code == 201
    assert (await thread(a, tid))["state"] == "running"  # queued: the agent has the floor
    claim = (await a.agent.post("/v1/agent/turns/claim", json={"wait_s": 0})).json()
    turn_id = claim["turn"]["id"]
    call_id, _ = await post_card(a.agent, tid, CHOICE, TEXT)
    assert (await thread(a, tid))["state"] == "running"
    assert (await a.agent.post(f"/v1/agent/turns/{turn_id}/finish")).status_code == 200
    listed = {t["id"]: t for t in (await a.user.get("/v1/threads")).json()["threads"]}
    assert listed[tid]["state"] == "waiting for you" and listed[tid]["open_cards"] == 2
    w_call = await post_call(a.agent, tid, "withdraw_question",
                             {"tool_call_id": call_id, "reason": "moot"})
    assert (await execute(a.agent, tid, w_call)).status_code == 200
    assert (await thread(a, tid))["state"] == "idle"  # the model said nothing; the cards did


async def test_whole_card_single_answer_main_and_withdraw_race(harness: Harness) -> None:
    """One card of three questions: the whole-card answer against a single answer (q2), the
    panel and Main (q1, held by Main), and the agent's withdraw (q5) — all at once. Each
    question has exactly one winner; each batch that won anything wrote exactly one message."""
    for i in range(4):
        a = await harness.actor(f"racer{i}")
        tid = await new_thread(a.user)
        call_id, _ = await post_card(a.agent, tid, CHOICE, TEXT, CHOICE_B)
        q1, q2, q5 = (f"{call_id}:{q}" for q in ("q1", "q2", "q5"))
        assert (await a.user.post(f"/v1/components/{q1}/to-main")).status_code == 200
        decision_id = (await a.user.get(f"/v1/components/{q1}")).json()["decision_id"]
        w_call = await post_call(a.agent, tid, "withdraw_question",
                                 {"component_id": q5, "reason": "moot"})
        m_call = await post_call(a.agent, a.main_thread_id, "answer_for_max",
                                 {"component_id": q1, "selected": ["keep"], "reason": "usual"})
        whole, single, panel, withdraw, main = await asyncio.gather(
            a.user.post(f"/v1/cards/{call_id}/answer", json={"answers": {
                "q1": {"selected": ["drop"]}, "q2": {"text": "whole"},
                "q5": {"selected": ["pg"]}}}),
            a.user.post(f"/v1/components/{q2}/answer", json={"text": "single"}),
            a.user.post(f"/v1/decisions/{decision_id}/settle", json={"selected": ["drop"]}),
            execute(a.agent, tid, w_call),
            execute(a.agent, a.main_thread_id, m_call))
        assert whole.status_code == 200, whole.text
        got = whole.json()["components"]
        won_by_whole = sorted(c for c, v in got.items() if "error" not in v)
        # q1: the card is locked while Main holds it; the panel or Main wins
        assert got[q1]["error"]["code"] in ("locked", "settled")
        assert (panel.status_code == 200) + (main.status_code == 200) == 1, (panel.text,
                                                                            main.text)
        assert (q2 in won_by_whole) + (single.status_code == 200) == 1
        assert (q5 in won_by_whole) + (withdraw.status_code == 200) == 1
        messages = await answer_messages(harness, tid)
        batches = [answered_ids(m["source_meta"]) for m in messages]
        expected = ([won_by_whole] if won_by_whole else []) \
            + ([[q2]] if single.status_code == 200 else []) \
            + ([[q1]] if panel.status_code == 200 or main.status_code == 200 else [])
        assert sorted(batches) == sorted(expected), (batches, expected)
        for cid in (q1, q2, q5):  # one transition out of the question's pre-race state
            assert await count(harness, "SELECT count(*) FROM component_audit WHERE"
                               " component_id = $1 AND from_status IN ('open', 'with-main')"
                               " AND to_status <> 'with-main'", cid) == 1
        async with harness.services.db.connection() as conn:
            open_cards = await conn.fetchval("SELECT open_cards FROM threads"
                                             " WHERE id = $1::uuid", tid)
        assert open_cards == 0
