"""The OpenAI-SDK adapter against a local fake Chat Completions server (a real HTTP
server on a free port): plain and streamed replies, tool calls reassembled from fragments,
429 and 500 retried with backoff, 4xx refused at once, a stream cut short retried; and the
runtime driving a thread of the real app through the adapter."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from maxclaw.client.http import AgentClient
from maxclaw.client.runtime.loop import AgentRuntime
from maxclaw.client.runtime.openai_model import ModelError, OpenAIChatModel, OpenAISettings
from maxclaw.client.runtime.workspace_tools import LocalTools
from tests.conftest import Harness, free_port


@dataclass
class Plan:
    """What the fake answers, request by request: an int is an error status; a dict is a
    reply ``{"content", "tool_calls": [(id, name, arguments)], "cut": bool}``."""

    steps: list[Any]
    seen: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)


def _sse(chunk: dict[str, Any]) -> str:
    return f"data: {json.dumps(chunk)}\n\n"


def _stream(reply: dict[str, Any]) -> Iterator[str]:
    yield ": keep-alive comment\n\n"
    yield _sse({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})
    for piece in (reply.get("content") or "").split(" "):
        if piece:
            yield _sse({"choices": [{"index": 0, "delta": {"content": piece + " "}}]})
    calls = reply.get("tool_calls") or []
    for index, (call_id, name, _) in enumerate(calls):  # headers of every call first ...
        yield _sse({"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": index, "id": call_id, "type": "function",
             "function": {"name": name, "arguments": ""}}]}}]})
    for index, (_, _, arguments) in enumerate(calls):  # ... then arguments in fragments
        for start in range(0, len(arguments), 7):
            yield _sse({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": index, "function": {"arguments": arguments[start:start + 7]}}]}}]})
    if reply.get("cut"):
        return  # the connection ends mid-reply: no finish_reason, no [DONE]
    yield _sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    yield "data: [DONE]\n\n"


def _message(reply: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.get("content")}
    if reply.get("tool_calls"):
        message["tool_calls"] = [{"id": i, "type": "function",
                                  "function": {"name": n, "arguments": a}}
                                 for i, n, a in reply["tool_calls"]]
    return {"id": "chatcmpl-1", "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}


def fake_app(plan: Plan) -> Starlette:
    async def completions(request: Request) -> Response:
        body = await request.json()
        plan.seen.append(body)
        plan.headers.append(dict(request.headers))
        step = plan.steps.pop(0) if plan.steps else {"content": "out of plan"}
        if isinstance(step, int):
            headers = {"Retry-After": "0"} if step == 429 else {}
            return JSONResponse({"error": {"message": f"fake {step}"}}, status_code=step,
                                headers=headers)
        if body.get("stream"):
            return StreamingResponse(_stream(step), media_type="text/event-stream")
        return JSONResponse(_message(step))

    return Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])


@pytest.fixture
async def fake() -> AsyncIterator[tuple[Plan, str]]:
    plan = Plan(steps=[])
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(fake_app(plan), host="127.0.0.1", port=port,
                                           log_config=None, lifespan="off"))
    task = asyncio.create_task(server.serve())
    while not server.started:  # noqa: ASYNC110 - uvicorn exposes no event for "listening"
        await asyncio.sleep(0.01)
    yield plan, f"http://127.0.0.1:{port}/v1"
    server.should_exit = True
    await task


def model(base_url: str, stream: bool, retries: int = 4) -> OpenAIChatModel:
    return OpenAIChatModel(OpenAISettings(base_url=base_url, api_key="sk-fake", model="fake-1",
                                          stream=stream, max_retries=retries, backoff_s=0.01))


ARGS = json.dumps({"path": "notes/plan.md", "content": "step one\nstep two"})
TOOLS = [{"type": "function", "function": {"name": "write_file", "parameters": {}}}]


@pytest.mark.parametrize("stream", [False, True])
async def test_retries_429_and_500_then_reads_the_reply(fake: tuple[Plan, str],
                                                        stream: bool) -> None:
    plan, url = fake
    plan.steps = [429, 500, {"content": "Writing the plan now.",
                             "tool_calls": [("call_a", "write_file", ARGS),
                                            ("call_b", "read_file", '{"path": "x"}')]}]
    m = model(url, stream)
    try:
        reply = await m.complete([{"role": "user", "content": "plan it"}], TOOLS)
    finally:
        await m.aclose()
    assert m.attempts == 3
    assert len(plan.seen) == 3
    assert reply.content is not None
    assert reply.content.strip() == "Writing the plan now."
    assert [(c["id"], c["function"]["name"]) for c in reply.tool_calls] == [
        ("call_a", "write_file"), ("call_b", "read_file")]
    assert json.loads(reply.tool_calls[0]["function"]["arguments"]) == json.loads(ARGS)
    assert all(c["type"] == "function" for c in reply.tool_calls)
    sent = plan.seen[-1]
    assert sent["model"] == "fake-1"
    assert sent["stream"] is stream
    assert sent["tools"] == TOOLS
    assert sent["messages"] == [{"role": "user", "content": "plan it"}]
    assert plan.headers[-1]["authorization"] == "Bearer sk-fake"
    # sent by the official SDK (its retries and types), not by a hand-written client
    assert plan.headers[-1]["user-agent"].startswith("AsyncOpenAI/Python")
    assert plan.headers[-1]["x-stainless-retry-count"] == "2"


async def test_a_stream_cut_short_is_retried(fake: tuple[Plan, str]) -> None:
    plan, url = fake
    plan.steps = [{"content": "half a", "tool_calls": [("call_x", "write_file", ARGS)],
                   "cut": True},
                  {"content": "whole reply"}]
    m = model(url, stream=True)
    try:
        reply = await m.complete([{"role": "user", "content": "go"}], [])
    finally:
        await m.aclose()
    assert m.attempts == 2
    assert reply.content is not None
    assert reply.content.strip() == "whole reply"
    assert reply.tool_calls == []
    assert "tools" not in plan.seen[-1]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_client_error_is_not_retried(fake: tuple[Plan, str], stream: bool) -> None:
    plan, url = fake
    plan.steps = [400, {"content": "never reached"}]
    m = model(url, stream)
    try:
        with pytest.raises(ModelError, match="HTTP 400"):
            await m.complete([{"role": "user", "content": "go"}], [])
    finally:
        await m.aclose()
    assert m.attempts == 1


async def test_retries_run_out(fake: tuple[Plan, str]) -> None:
    plan, url = fake
    plan.steps = [500, 500, 429]
    m = model(url, stream=False, retries=2)
    try:
        with pytest.raises(ModelError, match="giving up after 3 attempts"):
            await m.complete([{"role": "user", "content": "go"}], [])
    finally:
        await m.aclose()
    assert len(plan.seen) == 3


async def test_the_runtime_asks_through_the_openai_adapter(fake: tuple[Plan, str],
                                                           harness: Harness,
                                                           tmp_path: Path) -> None:
    plan, url = fake
    ask = json.dumps({"title": "Pick a colour", "questions": [
        {"id": "c", "kind": "choice", "question": "Which colour?",
         "options": [{"id": "red", "label": "Red"}, {"id": "blue", "label": "Blue"}]}]})
    # the server numbers its calls call_0, …: the runtime makes ids unique service-wide
    plan.steps = [429, {"content": None, "tool_calls": [("call_0", "ask_user_question", ask)]},
                  500, {"content": "Asked; waiting for the colour."}]
    max_ = await harness.actor("max")
    thread = (await max_.user.post("/v1/threads", json={"title": "Paint"})).json()["id"]
    await max_.user.post(f"/v1/threads/{thread}/messages", json={"body": "paint the fence"})
    client = AgentClient("http://test", max_.agent_token,
                         transport=httpx.ASGITransport(app=harness.app))
    runtime = AgentRuntime(client, model(url, stream=True), LocalTools(tmp_path / "ws"))
    try:
        report = await runtime.run_once()
    finally:
        await runtime.aclose()
        await client.aclose()
    assert report is not None
    assert report.requests == 2
    assert report.finished is not None
    assert len(report.finished.open_components) == 1
    assert report.finished.open_components[0].endswith(":c")
    assert not report.finished.open_components[0].startswith("call_0:")
    second = plan.seen[-1]["messages"]
    assert second[0]["role"] == "system"
    assert second[1] == {"role": "user", "content": "paint the fence"}
    assert second[2]["tool_calls"][0]["function"]["name"] == "ask_user_question"
    assert json.loads(second[3]["content"])["posted"] is True
    assert {t["function"]["name"] for t in plan.seen[-1]["tools"]} >= {
        "ask_user_question", "read_file", "write_file", "run_command"}
