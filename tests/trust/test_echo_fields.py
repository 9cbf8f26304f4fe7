"""Finding 6: a secret the agent writes into a side field never reaches REST, frames or a table.

The echo guard masked content and arguments only. An agent that put the plaintext into an
event's ``source_meta``, a tool row's ``tool_call_id``, a tool call's id (from which component
ids, decision keys and the display are derived), a thread's title or a claim's ``runtime_id``
got it stored as it was. Each of those fields is now refused (``422`` naming the field) when it
holds one of the user's live secrets, before anything is derived from it.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from tests.cards import CHOICE, SECRET, ask_args, new_thread, post_card
from tests.conftest import Harness

PLANTED = "sk-planted-echo-4c2d8e1f"


async def tables_holding(h: Harness, text: str) -> list[str]:
    """Every table with a row whose columns (as text) hold ``text``."""
    hits: list[str] = []
    async with h.services.db.connection() as conn:
        tables = [r["tablename"] for r in await conn.fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
        for table in tables:
            for row in await conn.fetch(f'SELECT * FROM "{table}"'):  # test-only, fixed names
                if text in json.dumps(dict(row), default=str):
                    hits.append(table)
                    break
    return hits


def call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function",
            "function": {"name": "ask_user_question", "arguments": ask_args(CHOICE)}}


async def event_meta(agent: httpx.AsyncClient, tid: str) -> httpx.Response:
    return await agent.post(f"/v1/agent/threads/{tid}/messages", json={
        "role": "event", "body": "the build finished", "source_meta": {"job": PLANTED}})


async def event_meta_key(agent: httpx.AsyncClient, tid: str) -> httpx.Response:
    return await agent.post(f"/v1/agent/threads/{tid}/messages", json={
        "role": "event", "body": "the build finished", "source_meta": {PLANTED: 1}})


async def tool_row_id(agent: httpx.AsyncClient, tid: str) -> httpx.Response:
    return await agent.post(f"/v1/agent/threads/{tid}/messages", json={
        "role": "tool", "tool_call_id": f"x-{PLANTED}", "content": "ok"})


async def tool_call_id(agent: httpx.AsyncClient, tid: str) -> httpx.Response:
    return await agent.post(f"/v1/agent/threads/{tid}/messages", json={
        "role": "assistant", "content": None, "tool_calls": [call(f"c-{PLANTED}")]})


async def tool_call_id_executed(agent: httpx.AsyncClient, tid: str) -> httpx.Response:
    return await agent.post(f"/v1/agent/threads/{tid}/messages", json={
        "role": "assistant", "content": None, "execute": True,
        "tool_calls": [call(f"c-{PLANTED}")]})


async def thread_title(agent: httpx.AsyncClient, tid: str) -> httpx.Response:
    return await agent.post("/v1/agent/threads", json={"title": f"about {PLANTED}"})


async def runtime_id(agent: httpx.AsyncClient, tid: str) -> httpx.Response:
    return await agent.post("/v1/agent/turns/claim",
                            json={"wait_s": 0, "runtime_id": f"rt-{PLANTED}"})


async def lease_runtime(agent: httpx.AsyncClient, tid: str) -> httpx.Response:
    return await agent.post("/v1/agent/leases", json={"runtime": f"rt-{PLANTED}"})


WRITES: dict[str, tuple[Callable[[httpx.AsyncClient, str], Awaitable[httpx.Response]], str]] = {
    "event source_meta": (event_meta, "source_meta"),
    "event source_meta key": (event_meta_key, "source_meta"),
    "tool row tool_call_id": (tool_row_id, "tool_call_id"),
    "tool call id": (tool_call_id, "tool_calls"),
    "tool call id, executed": (tool_call_id_executed, "tool_calls"),
    "agent thread title": (thread_title, "title"),
    "claim runtime_id": (runtime_id, "runtime_id"),
    "lease runtime": (lease_runtime, "runtime"),
}


@pytest.mark.parametrize("write", list(WRITES))
async def test_a_secret_in_a_side_field_is_refused_and_stored_nowhere(
        harness: Harness, write: str) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    call_id, _ = await post_card(a.agent, tid, SECRET)
    answered = await a.user.post(f"/v1/components/{call_id}:q3/answer", json={"text": PLANTED})
    assert answered.status_code == 200, answered.text
    assert await tables_holding(harness, PLANTED) == []  # the control: sealed, masked
    send, field = WRITES[write]
    resp = await send(a.agent, tid)
    # before: 201/200 and the plaintext in messages, message_components, decisions, turns…
    assert resp.status_code == 422, resp.text
    assert resp.json()["code"] == "invalid" and field in resp.text
    assert PLANTED not in resp.text
    assert await tables_holding(harness, PLANTED) == []
    for path in ["/v1/threads", f"/v1/threads/{tid}/messages", "/v1/decisions?status=all"]:
        got = await a.user.get(path)
        assert got.status_code == 200 and PLANTED not in got.text


async def test_a_field_without_a_secret_is_still_written(harness: Harness) -> None:
    """The positive control: the same writes with an ordinary value pass."""
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    call_id, _ = await post_card(a.agent, tid, SECRET)
    await a.user.post(f"/v1/components/{call_id}:q3/answer", json={"text": PLANTED})
    ok = await a.agent.post(f"/v1/agent/threads/{tid}/messages", json={
        "role": "event", "body": "the build finished", "source_meta": {"job": "build-17"}})
    assert ok.status_code == 201, ok.text
    made = await a.agent.post("/v1/agent/threads", json={"title": "the deploy"})
    assert made.status_code == 201, made.text
    claim = await a.agent.post("/v1/agent/turns/claim", json={"wait_s": 0, "runtime_id": "rt-1"})
    assert claim.status_code == 200, claim.text
    lease = await a.agent.post("/v1/agent/leases", json={"runtime": "rt-1"})
    assert lease.status_code == 201, lease.text
