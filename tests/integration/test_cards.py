"""Cards: posting returns at once; an answer becomes one message, exactly once."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.cards import (
    CHOICE,
    OBJECT,
    SECRET,
    TEXT,
    ask_args,
    execute,
    new_thread,
    post_call,
    post_card,
)
from tests.conftest import Harness


async def messages(h: Harness, user: Any, thread_id: str) -> list[dict[str, Any]]:
    resp = await user.get(f"/v1/threads/{thread_id}/messages?limit=500")
    return list(resp.json()["messages"])


async def answer_messages(h: Harness, user: Any, thread_id: str, cid: str) -> list[dict[str, Any]]:
    return [m for m in await messages(h, user, thread_id)
            if (m["source_meta"] or {}).get("componentAnswer", {}).get("componentId") == cid]


async def test_post_returns_posted_with_note_and_is_idempotent(harness: Harness) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    call_id, content = await post_card(a.agent, tid, CHOICE, TEXT)
    assert content["posted"] is True
    assert "not wait" in content["note"] and "ask the same question again" in content["note"]
    assert [c["id"] for c in content["components"]] == [f"{call_id}:q1", f"{call_id}:q2"]
    again = await execute(a.agent, tid, call_id)
    assert again.status_code == 200 and again.json()["content"] == content
    async with harness.services.db.connection() as conn:
        n_components = await conn.fetchval("SELECT count(*) FROM message_components")
        n_tool_rows = await conn.fetchval("SELECT count(*) FROM messages WHERE role = 'tool'")
        n_decisions = await conn.fetchval("SELECT count(*) FROM decisions")
    assert (n_components, n_tool_rows, n_decisions) == (2, 1, 2)  # not watching: carriers made
    msgs = await messages(harness, a.user, tid)
    assistant = next(m for m in msgs if m["role"] == "assistant")
    assert [c["id"] for c in assistant["components"]] == [f"{call_id}:q1", f"{call_id}:q2"]
    assert assistant["components"][0]["options"][0] == {
        "id": "keep", "label": "Keep one version", "recommended": True}
    tool = next(m for m in msgs if m["role"] == "tool")
    assert tool["display"]["v"] == 1 and tool["display"]["kind"] == "components"
    assert tool["display"]["states"][f"{call_id}:q1"]["status"] == "open"


async def test_a_second_answer_is_refused_and_sends_nothing(harness: Harness) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    call_id, _ = await post_card(a.agent, tid, CHOICE)
    cid = f"{call_id}:q1"
    first = await a.user.post(f"/v1/components/{cid}/answer", json={"selected": ["keep"]})
    assert first.status_code == 200, first.text
    assert first.json()["status"] == "answered" and first.json()["answered_via"] == "card"
    second = await a.user.post(f"/v1/components/{cid}/answer",
                               json={"selected": ["drop"], "text": "changed my mind"})
    assert second.status_code == 409 and second.json()["code"] == "settled"
    answers = await answer_messages(harness, a.user, tid, cid)
    assert len(answers) == 1
    assert 'Answer to "Rename the status field"' in answers[0]["body"]
    assert cid in answers[0]["body"] and "Keep one version" in answers[0]["body"]
    assert answers[0]["source_meta"]["componentAnswer"] == {
        "componentId": cid, "answeredBy": "max", "via": "card",
        # what the WebUI draws the answer chip from (fields may only be added)
        "title": "Rename the status field", "question": "Keep the old field for one version?",
        "labels": ["Keep one version"], "note": None}


async def test_answer_wakes_an_idle_thread(harness: Harness) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    call_id, _ = await post_card(a.agent, tid, CHOICE)
    assert (await a.user.get(f"/v1/threads/{tid}")).json()["turn_state"] == "idle"
    await a.user.post(f"/v1/components/{call_id}:q1/answer", json={"selected": ["drop"]})
    assert (await a.user.get(f"/v1/threads/{tid}")).json()["turn_state"] == "queued"


@pytest.mark.parametrize("round_", range(3))
async def test_race_of_64_answers_has_one_winner(harness: Harness, round_: int) -> None:
    a = await harness.actor(f"max{round_}")
    tid = await new_thread(a.user)
    call_id, _ = await post_card(a.agent, tid, CHOICE)
    cid = f"{call_id}:q1"
    bodies = [{"selected": [], "text": f"answer number {i}"} for i in range(64)]
    results = await asyncio.gather(*[
        a.user.post(f"/v1/components/{cid}/answer", json=b) for b in bodies])
    codes = sorted(r.status_code for r in results)
    assert codes == [200] + [409] * 63
    winner = next(r for r in results if r.status_code == 200).json()
    assert all(r.json()["code"] == "settled" for r in results if r.status_code == 409)
    answers = await answer_messages(harness, a.user, tid, cid)
    assert len(answers) == 1 and winner["answer"]["text"] in answers[0]["body"]
    tool = next(m for m in await messages(harness, a.user, tid) if m["role"] == "tool")
    assert tool["display"]["states"][cid]["answer"] == winner["answer"]
    decisions = (await a.user.get("/v1/decisions?status=all")).json()["decisions"]
    assert [d["status"] for d in decisions] == ["settled"]
    assert decisions[0]["settled_via"] == "card"


async def test_several_open_cards_answered_in_any_order(harness: Harness) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    c1, _ = await post_card(a.agent, tid, CHOICE, title="First card")
    c2, _ = await post_card(a.agent, tid, TEXT, title="Second card")
    c3, _ = await post_card(a.agent, tid, OBJECT, title="Third card")
    assert (await a.user.post(f"/v1/components/{c3}:q4/answer",
                              json={"selected": ["reject"]})).status_code == 200
    assert (await a.user.post(f"/v1/components/{c1}:q1/answer",
                              json={"selected": [], "text": "Keep two"})).status_code == 200
    assert (await a.user.post(f"/v1/components/{c2}:q2/answer",
                              json={"text": "Renamed status"})).status_code == 200
    bodies = [m["body"] for m in await messages(harness, a.user, tid) if m["role"] == "user"]
    assert len(bodies) == 3
    assert 'Answer to "Third card"' in bodies[0] and "Action: Reject" in bodies[0]
    assert 'Answer to "First card"' in bodies[1] and "Keep two" in bodies[1]
    assert 'Answer to "Second card"' in bodies[2] and "Renamed status" in bodies[2]


async def test_two_components_of_one_card_both_mirror(harness: Harness) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    call_id, _ = await post_card(a.agent, tid, CHOICE, TEXT)
    r1, r2 = await asyncio.gather(
        a.user.post(f"/v1/components/{call_id}:q1/answer", json={"selected": ["keep"]}),
        a.user.post(f"/v1/components/{call_id}:q2/answer", json={"text": "none"}))
    assert (r1.status_code, r2.status_code) == (200, 200)
    tool = next(m for m in await messages(harness, a.user, tid) if m["role"] == "tool")
    states = tool["display"]["states"]
    assert states[f"{call_id}:q1"]["status"] == states[f"{call_id}:q2"]["status"] == "answered"


INVALID_ANSWERS = [
    ("choice", {"selected": ["keep", "drop"]}),
    ("choice", {"selected": ["nope"]}),
    ("choice", {"selected": []}),
    ("choice", {"selected": [], "text": "   "}),
    ("choice", {"selected": "keep"}),
    ("multi", {"selected": []}),
    ("multi", {"selected": ["a", "a"]}),
    ("text", {"text": ""}),
    ("text", {"text": "  \n "}),
    ("text", {"text": "x" * 10_001}),
    ("text", {"selected": ["a"], "text": "x"}),
    ("secret", {}),
    ("object", {"selected": []}),
    ("object", {"selected": ["apply", "reject"]}),
    ("object", {"selected": ["ship"]}),
    ("noother", {"selected": [], "text": "my own"}),
]


@pytest.mark.parametrize(("kind", "body"), INVALID_ANSWERS)
async def test_invalid_answers_are_422_and_change_nothing(harness: Harness, kind: str,
                                                          body: dict[str, Any]) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    questions = {
        "choice": CHOICE, "text": TEXT, "secret": SECRET, "object": OBJECT,
        "multi": {"id": "q1", "kind": "choice", "question": "Which?", "multiple": True,
                  "options": [{"id": "a", "label": "A"}, {"id": "b", "label": "B"}]},
        "noother": {**CHOICE, "allow_other": False},
    }
    _, content = await post_card(a.agent, tid, questions[kind])
    cid = content["components"][0]["id"]
    resp = await a.user.post(f"/v1/components/{cid}/answer", json=body)
    assert resp.status_code == 422, resp.text
    err = resp.json()
    assert err["code"] == "invalid" and err["data"]["errors"][0]["loc"][0] == "body"
    got = (await a.user.get(f"/v1/components/{cid}")).json()
    assert got["status"] == "open" and got["answer"] is None
    assert not [m for m in await messages(harness, a.user, tid) if m["role"] == "user"]


VALID_ANSWERS = [
    ("choice", {"selected": ["drop"], "text": "with a note"}),
    ("choice", {"selected": [], "text": "something else"}),
    ("multi", {"selected": ["a", "b"]}),
    ("object", {"selected": ["apply"]}),
]


@pytest.mark.parametrize(("kind", "body"), VALID_ANSWERS)
async def test_valid_answer_shapes(harness: Harness, kind: str, body: dict[str, Any]) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    q = {"choice": CHOICE, "object": OBJECT,
         "multi": {"id": "q1", "kind": "choice", "question": "Which?", "multiple": True,
                   "options": [{"id": "a", "label": "Alpha"}, {"id": "b", "label": "Beta"}]}}[kind]
    _, content = await post_card(a.agent, tid, q)
    resp = await a.user.post(f"/v1/components/{content['components'][0]['id']}/answer", json=body)
    assert resp.status_code == 200, resp.text
    assert resp.json()["answer"] == {"selected": body["selected"], "text": body.get("text")}


INVALID_ARGS = [
    ({"questions": [CHOICE]}, "title"),
    (ask_args(*[{**TEXT, "id": f"q{i}"} for i in range(9)]), "questions"),
    (ask_args(CHOICE, CHOICE), "questions"),
    (ask_args({**CHOICE, "id": "bad id!"}), "id"),
    (ask_args({**CHOICE, "options": [CHOICE["options"][0]]}), "choice"),
    (ask_args({**CHOICE, "options": [{"id": f"o{i}", "label": "x"} for i in range(13)]}),
     "choice"),
    (ask_args({**CHOICE, "options": [{"id": "a", "label": "x"}, {"id": "a", "label": "y"}]}),
     "unique"),
    (ask_args({**CHOICE, "options": [{"id": "a", "label": "x" * 201},
                                     {"id": "b", "label": "y"}]}), "label"),
    (ask_args({**TEXT, "question": "x" * 2001}), "question"),
    (ask_args({**OBJECT, "object": {"content": "x" * (256 * 1024)}}), "256 KiB"),
    (ask_args(CHOICE, main_after_minutes=10081), "main_after_minutes"),
    (ask_args(CHOICE, main_after_minutes=-1), "main_after_minutes"),
    (ask_args(CHOICE, main_after_minutes=1.5), "main_after_minutes"),
    (ask_args(CHOICE, stakes="huge"), "stakes"),
    (ask_args({**TEXT, "kind": "poll"}), "kind"),
    (ask_args({**OBJECT, "actions": []}), "actions"),
    (ask_args(), "questions") if False else ({"title": "t", "questions": []}, "questions"),
]


@pytest.mark.parametrize(("args", "mentions"), INVALID_ARGS)
async def test_invalid_arguments_are_422_with_a_tool_row(harness: Harness, args: dict[str, Any],
                                                         mentions: str) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    call_id = await post_call(a.agent, tid, "ask_user_question", args)
    resp = await execute(a.agent, tid, call_id)
    assert resp.status_code == 422, resp.text
    body = resp.json()
    assert body["code"] == "invalid" and body["content"]["posted"] is False
    assert mentions in body["content"]["error"] or mentions in json.dumps(body["data"])
    assert body["data"]["errors"][0]["loc"][0] == "arguments"
    again = await execute(a.agent, tid, call_id)
    assert again.status_code == 422 and again.json()["content"] == body["content"]
    async with harness.services.db.connection() as conn:
        assert await conn.fetchval("SELECT count(*) FROM message_components") == 0
        assert await conn.fetchval("SELECT count(*) FROM messages WHERE role = 'tool'") == 1


async def test_watching_means_an_hour_and_no_carrier(harness: Harness) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    await harness.services.presence.focus("conn-1", a.user_id, tid)
    _, content = await post_card(a.agent, tid, CHOICE, main_after_minutes=5)
    got = (await a.user.get(f"/v1/components/{content['components'][0]['id']}")).json()
    assert got["decision_id"] is None
    async with harness.services.db.connection() as conn:
        minutes = await conn.fetchval(
            "SELECT extract(epoch FROM due_at - posted_at) / 60 FROM message_components")
    assert 59 <= float(minutes) <= 61
    await harness.services.presence.leave("conn-1", a.user_id)
    _, content = await post_card(a.agent, tid, CHOICE, main_after_minutes=5)
    got = (await a.user.get(f"/v1/components/{content['components'][0]['id']}")).json()
    assert got["decision_id"] is not None


async def test_background_threads_get_no_ask_tool(harness: Harness) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a.user, kind="background")
    tools = (await a.agent.get(f"/v1/agent/tools?thread_id={tid}")).json()["tools"]
    assert tools == []
    call_id = await post_call(a.agent, tid, "ask_user_question", ask_args(CHOICE))
    resp = await execute(a.agent, tid, call_id)
    assert resp.status_code == 403 and resp.json()["code"] == "forbidden"
    # the refusal is the call's result, in the model's words, and a retry replays it
    refusal = {"posted": False,
               "error": "ask_user_question is not offered in a background thread."}
    assert resp.json()["content"] == refusal
    again = await execute(a.agent, tid, call_id)
    assert (again.status_code, again.json()["content"]) == (403, refusal)
    history = (await a.agent.get(f"/v1/agent/threads/{tid}/history")).json()["messages"]
    assert [m["role"] for m in history] == ["assistant", "tool"]
    assert json.loads(history[1]["content"]) == refusal
    main_tools = (await a.agent.get(f"/v1/agent/tools?thread_id={a.main_thread_id}")).json()
    assert [t["function"]["name"] for t in main_tools["tools"]] == [
        "ask_user_question", "withdraw_question", "answer_for_max", "hand_back",
        "list_open_questions", "read_thread"]
