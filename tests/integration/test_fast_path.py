"""Every client takes the fast path (issue 33, item 2): an assistant row that carries service
tools is one request — posted with ``"execute": true`` — never a post followed by ``execute``.

The requests are counted at the client's transport (a counting proxy in front of the app), so
the proof holds whatever the server does inside; the transactions are counted from the
statements the pool sends (``bench.counting.commits``).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
from bench.counting import commits, drain, installed

from maxclaw.app import create_app
from maxclaw.client import scenario
from maxclaw.client.http import AgentClient
from maxclaw.client.mcp_stdio import RestBackend
from maxclaw.client.runtime.loop import AgentRuntime
from maxclaw.client.runtime.scripted import ScriptedModel
from maxclaw.client.runtime.workspace_tools import LocalTools
from tests.conftest import Harness, app_settings


class CountingTransport(httpx.AsyncBaseTransport):
    """A local proxy in front of the app: records every request's method and path."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.seen: list[tuple[str, str, dict[str, Any] | None]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        self.seen.append((request.method, request.url.path, body))
        return await self.inner.handle_async_request(request)

    def paths(self) -> Counter[str]:
        return Counter(f"{m} {p.rsplit('/', 1)[-1]}" for m, p, _ in self.seen)


async def test_runtime_posts_each_tool_carrying_row_in_one_request(harness: Harness,
                                                                    tmp_path: Path) -> None:
    actor = await harness.actor("max")
    resp = await actor.user.post("/v1/threads", json={"title": "Order service"})
    thread_id = resp.json()["id"]
    scenario.write_fixture(tmp_path)
    proxy = CountingTransport(httpx.ASGITransport(app=harness.app))
    client = AgentClient("http://test", actor.agent_token, transport=proxy)
    runtime = AgentRuntime(client, ScriptedModel(scenario.level4_script()), LocalTools(tmp_path),
                           runtime_id="rt-fast")
    try:
        said = await actor.user.post(f"/v1/threads/{thread_id}/messages",
                                     json={"body": scenario.TASK})
        assert said.status_code == 201
        report = await runtime.run_once()
        assert report is not None and report.finished is not None
    finally:
        await runtime.aclose()
        await client.aclose()
    rows = [body for method, path, body in proxy.seen
            if method == "POST" and path.endswith("/messages") and body
            and body.get("role") == "assistant"]
    service = {"ask_user_question", "withdraw_question"}
    carrying = [r for r in rows
                if any(c["function"]["name"] in service for c in r.get("tool_calls") or [])]
    assert carrying, "the scripted turn asks Max at least once"
    assert all(r.get("execute") is True for r in carrying)
    # nothing executed afterwards: the post was the whole round trip
    assert not [p for _, p, _ in proxy.seen if p.endswith("/execute")], proxy.paths()


async def test_maxclaw_mcp_asks_in_one_request_and_one_transaction(database_url: str) -> None:
    with installed() as log:
        app = create_app(app_settings(database_url))
        async with app.router.lifespan_context(app):
            services = app.state.services
            user_id, _ = await services.auth.create_user("max")
            token = await services.auth.create_token("max", "agent")
            proxy = CountingTransport(httpx.ASGITransport(app=app))
            async with AgentClient("http://test", token, transport=proxy) as client:
                created = (await client._request("POST", "/v1/agent/threads",
                                                 json={"title": "MCP"})).json()
                backend = RestBackend(client)
                ask = {"title": "Rename?", "questions": [
                    {"id": "q1", "kind": "choice", "question": "Which name?",
                     "options": [{"id": "a", "label": "order_id"},
                                 {"id": "b", "label": "orderId"}]}]}
                # warm: the pool's connections have introspected their types (asyncpg)
                await backend.run(created["id"], "mcp_warm", "ask_user_question", ask)
                proxy.seen.clear()
                with log.record() as queries:
                    status, content = await backend.run(created["id"], "mcp_fast_1",
                                                        "ask_user_question", ask)
                    await drain()
                asked = commits(list(queries))
                assert status == 200 and content["posted"] is True, content
                assert [(m, p.rsplit("/", 1)[-1]) for m, p, _ in proxy.seen] == \
                    [("POST", "messages")]
                assert proxy.seen[0][2]["execute"] is True
                # one read, then one statement writes the row and its card
                assert asked <= 2, [q[:80] for q in queries]

                # the same MCP request again replays the stored result, in one request
                proxy.seen.clear()
                again = await backend.run(created["id"], "mcp_fast_1", "ask_user_question", ask)
                assert again == (status, content)
                assert len(proxy.seen) == 1

                # a withdrawal, too, is one request (the service runs it in its own steps)
                proxy.seen.clear()
                status, content = await backend.run(
                    created["id"], "mcp_fast_2", "withdraw_question",
                    {"tool_call_id": "mcp_fast_1", "reason": "done"})
                assert status == 200, content
                assert len(proxy.seen) == 1
            assert user_id
