"""The agent contract's sharp edges: string tool results reach the model
as the same string, every message a claim, an inbox and a history return is a valid
``ChatCompletionMessageParam`` (OpenAI's own SDK types judge the shape), an agent token reads
its thread's cards, and a thread's inbox outside a turn delivers once."""

from __future__ import annotations

import json
from typing import Any

from openai.types.chat import ChatCompletionMessageParam
from pydantic import TypeAdapter

from tests.cards import CHOICE, SECRET, ask_args, execute, new_thread, post_call
from tests.conftest import Harness

CHAT_MESSAGE: TypeAdapter[ChatCompletionMessageParam] = TypeAdapter(ChatCompletionMessageParam)


def valid_chat(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for message in messages:
        CHAT_MESSAGE.validate_python(message)
    return messages


async def test_claim_inbox_and_history_are_chat_completions_messages(harness: Harness) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a.user, title="Docs")
    assert (await a.user.post(f"/v1/threads/{tid}/messages",
                              json={"body": "Find the readme"})).status_code == 201
    claim = (await a.agent.post("/v1/agent/turns/claim", json={})).json()
    turn = claim["turn"]["id"]
    valid_chat(claim["messages"])

    # a local tool's string result, and a command's multi-line output
    resp = await a.agent.post(f"/v1/agent/threads/{tid}/messages", json={
        "role": "assistant", "content": None, "turn_id": turn, "tool_calls": [
            {"id": "c_find", "type": "function",
             "function": {"name": "find", "arguments": "{}"}},
            {"id": "c_run", "type": "function",
             "function": {"name": "run", "arguments": '{"cmd": "ls"}'}}]})
    assert resp.status_code == 201
    output = 'total 2\n-rw-r--r-- "README.md"\n\tsrc/\n'
    for call_id, content in (("c_find", "README.md"), ("c_run", output)):
        resp = await a.agent.post(f"/v1/agent/threads/{tid}/messages", json={
            "role": "tool", "tool_call_id": call_id, "content": content, "turn_id": turn})
        assert resp.status_code == 201
    call_id = await post_call(a.agent, tid, "ask_user_question", ask_args(CHOICE, SECRET))
    assert (await execute(a.agent, tid, call_id)).status_code == 200
    await a.user.post(f"/v1/components/{call_id}:q1/answer", json={"selected": ["keep"]})
    await a.user.post(f"/v1/components/{call_id}:q3/answer", json={"text": "s3cr3t"})

    inbox = valid_chat((await a.agent.post(f"/v1/agent/turns/{turn}/inbox")).json()["messages"])
    assert len(inbox) == 2 and all(m["role"] == "user" for m in inbox)
    history = valid_chat((await a.agent.get(f"/v1/agent/threads/{tid}/history")).json()[
        "messages"])
    results = {m["tool_call_id"]: m["content"] for m in history if m["role"] == "tool"}
    assert results["c_find"] == "README.md"  # not "\"README.md\""
    assert results["c_run"] == output
    assert json.loads(results[call_id])["posted"] is True  # structured stays JSON text
    assert (await a.agent.post(f"/v1/agent/turns/{turn}/finish")).status_code == 200


async def test_agent_reads_its_thread_cards(harness: Harness) -> None:
    a = await harness.actor("max")
    eve = await harness.actor("eve")
    tid = await new_thread(a.user)
    call_id = await post_call(a.agent, tid, "ask_user_question", ask_args(CHOICE, SECRET))
    assert (await execute(a.agent, tid, call_id)).status_code == 200
    await a.user.post(f"/v1/components/{call_id}:q3/answer", json={"text": "s3cr3t"})

    resp = await a.agent.get(f"/v1/agent/threads/{tid}/components")
    assert resp.status_code == 200, resp.text
    cards = {c["id"]: c for c in resp.json()["components"]}
    assert list(cards) == [f"{call_id}:q1", f"{call_id}:q3"]
    assert cards[f"{call_id}:q1"]["status"] == "open"
    assert cards[f"{call_id}:q1"]["options"][0]["id"] == "keep"
    assert cards[f"{call_id}:q3"]["status"] == "answered"
    assert cards[f"{call_id}:q3"]["answer"] == {"selected": [], "hidden": True}
    assert "s3cr3t" not in resp.text
    # the same as the user's own view of each card
    for cid, card in cards.items():
        assert card == (await a.user.get(f"/v1/components/{cid}")).json()
    # another user's agent, a user token, a malformed id
    assert (await eve.agent.get(f"/v1/agent/threads/{tid}/components")).status_code == 404
    assert (await a.user.get(f"/v1/agent/threads/{tid}/components")).status_code == 403
    assert (await a.agent.get("/v1/agent/threads/nope/components")).status_code == 404


async def test_thread_inbox_outside_a_turn_delivers_once(harness: Harness) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    call_id = await post_call(a.agent, tid, "ask_user_question", ask_args(CHOICE))
    assert (await execute(a.agent, tid, call_id)).status_code == 200
    assert (await a.agent.post(f"/v1/agent/threads/{tid}/inbox")).json() == {"messages": []}
    await a.user.post(f"/v1/components/{call_id}:q1/answer", json={"selected": ["drop"]})
    thread = (await a.user.get(f"/v1/threads/{tid}")).json()
    assert thread["turn_state"] == "queued"  # the answer queued a turn

    first = valid_chat((await a.agent.post(f"/v1/agent/threads/{tid}/inbox")).json()[
        "messages"])
    assert len(first) == 1 and "Remove it now" in first[0]["content"]
    assert (await a.agent.post(f"/v1/agent/threads/{tid}/inbox")).json() == {"messages": []}
    card = (await a.user.get(f"/v1/components/{call_id}:q1")).json()
    assert card["seen_at"] is not None
    # the delivery consumed the turn it queued: no runtime will run it again
    assert (await a.user.get(f"/v1/threads/{tid}")).json()["turn_state"] == "idle"
    assert (await a.agent.post("/v1/agent/turns/claim", json={})).status_code == 204

    # while a runtime runs a turn, its inbox is the one that delivers
    await a.user.post(f"/v1/threads/{tid}/messages", json={"body": "and another thing"})
    assert (await a.agent.post("/v1/agent/turns/claim", json={})).status_code == 200
    busy = await a.agent.post(f"/v1/agent/threads/{tid}/inbox")
    assert busy.status_code == 409 and busy.json()["code"] == "conflict"


async def test_agent_creates_a_thread_unless_bound(harness: Harness) -> None:
    a = await harness.actor("max")
    resp = await a.agent.post("/v1/agent/threads", json={"title": "From my agent"})
    assert resp.status_code == 201, resp.text
    created = resp.json()
    assert (created["kind"], created["title"]) == ("normal", "From my agent")
    assert (await a.user.get(f"/v1/threads/{created['id']}")).status_code == 200
    bound = await harness.services.auth.create_token("max", "agent", created["id"])
    refused = await harness.with_token(bound).post("/v1/agent/threads", json={"title": "x"})
    assert refused.status_code == 403
    assert (await a.agent.post("/v1/agent/threads",
                               json={"title": "x", "kind": "main"})).status_code == 422
