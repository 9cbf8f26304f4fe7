"""``python -m bench.client_paths``: requests and commits per turn of the demo scenario, by client
(issue 33, item 2).

In-process (the app as ``serve`` builds it, its background jobs off, so only the client's
traffic is counted), on a fresh database:

- the reference runtime: one turn of the demo's level-4 script (``scenario.level4_script``,
  also with ``plan_change``: it supersedes its question and withdraws another), posting rows
  with service tools with ``"execute": true`` (``fast``) or, as before issue 32, posting and
  then calling ``execute`` (``two-step``: the same runtime with the flag dropped);
- ``maxclaw mcp``'s REST backend: ``ask_user_question``, the same MCP request again, then
  ``withdraw_question`` — with whatever ``RestBackend.run`` the code measured has (run it with
  ``PYTHONPATH=<other tree>/src`` to measure another version).

Requests are counted at the client's transport; commits from the statements the pool sends
(``bench.counting``): a BEGIN … COMMIT block is one, and so is each statement outside one
(autocommit), as ``pg_stat_database.xact_commit`` counts them; the pool's reset is left out.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx

from bench import counting, roundtrip
from bench.pg import fresh_database
from maxclaw.app import create_app
from maxclaw.client import scenario
from maxclaw.client.http import AgentClient
from maxclaw.client.mcp_stdio import RestBackend
from maxclaw.client.runtime.loop import AgentRuntime
from maxclaw.client.runtime.scripted import ScriptedModel
from maxclaw.client.runtime.workspace_tools import LocalTools

CARD = {"title": "Rename?", "questions": [
    {"id": "q1", "kind": "choice", "question": "Which name?",
     "options": [{"id": "a", "label": "order_id"}, {"id": "b", "label": "orderId"}]}]}


class Counting(httpx.AsyncBaseTransport):
    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.requests: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(f"{request.method} {request.url.path.rsplit('/', 1)[-1]}")
        return await self.inner.handle_async_request(request)


class TwoStep(AgentClient):
    """The runtime as it was before issue 32: a row posted, then each service call executed."""

    async def post_assistant(self, thread_id: str, content: str | None,
                             tool_calls: list[dict[str, Any]] | None, turn_id: int | None, *,
                             execute: bool = False) -> Any:
        return await super().post_assistant(thread_id, content, tool_calls, turn_id)


@asynccontextmanager
async def app_for(url: str) -> AsyncIterator[Any]:
    app = create_app(roundtrip.in_process_settings(url, pool_max=4))
    async with app.router.lifespan_context(app):
        yield app


async def runtime_turn(app: Any, log: counting.StatementLog, name: str, two_step: bool,
                       plan_change: bool) -> dict[str, Any]:
    services = app.state.services
    await services.auth.create_user(name)
    user_token = await services.auth.create_token(name, "user")
    agent_token = await services.auth.create_token(name, "agent")
    asgi = httpx.ASGITransport(app=app)
    user = httpx.AsyncClient(transport=asgi, base_url="http://test",
                             headers={"Authorization": f"Bearer {user_token}"})
    thread_id = (await user.post("/v1/threads", json={"title": "Order service"})).json()["id"]
    await user.post(f"/v1/threads/{thread_id}/messages", json={"body": scenario.TASK})
    proxy = Counting(asgi)
    client = (TwoStep if two_step else AgentClient)("http://test", agent_token, transport=proxy)
    with tempfile.TemporaryDirectory() as workspace:
        scenario.write_fixture(Path(workspace))
        runtime = AgentRuntime(client, ScriptedModel(scenario.level4_script(
            plan_change=plan_change)), LocalTools(Path(workspace)), runtime_id=name)
        with log.record() as queries:
            report = await runtime.run_once()
            await counting.drain()
        await runtime.aclose()
    await client.aclose()
    await user.aclose()
    assert report is not None and report.finished is not None, "the turn did not finish"
    return {"requests": len(proxy.requests), "commits": counting.commits(list(queries)),
            "model_requests": report.requests,
            "by_route": {r: proxy.requests.count(r) for r in sorted(set(proxy.requests))}}


async def mcp_calls(app: Any, log: counting.StatementLog) -> dict[str, Any]:
    services = app.state.services
    await services.auth.create_user("mcp")
    token = await services.auth.create_token("mcp", "agent")
    proxy = Counting(httpx.ASGITransport(app=app))
    out: dict[str, Any] = {}
    async with AgentClient("http://test", token, transport=proxy) as client:
        thread = (await client._request("POST", "/v1/agent/threads",
                                        json={"title": "MCP"})).json()["id"]
        backend = RestBackend(client)
        await backend.run(thread, "mcp_warm", "ask_user_question", CARD)  # warm the pool
        calls = [("ask_user_question", "mcp_1", CARD), ("ask_user_question (again)", "mcp_1",
                                                        CARD),
                 ("withdraw_question", "mcp_2", {"tool_call_id": "mcp_1", "reason": "done"})]
        for label, call_id, args in calls:
            proxy.requests.clear()
            with log.record() as queries:
                status, _ = await backend.run(thread, call_id, label.split(" ")[0], args)
                await counting.drain()
            out[label] = {"status": status, "requests": len(proxy.requests),
                          "commits": counting.commits(list(queries))}
    return out


async def measure(url: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with counting.installed() as log:
        async with app_for(url) as app:
            for plan_change in (False, True):
                for two_step in (True, False):
                    key = (f"runtime {'plan_change' if plan_change else 'level4'} "
                           f"{'two-step' if two_step else 'fast'}")
                    out[key] = await runtime_turn(app, log, f"rt{len(out)}", two_step,
                                                  plan_change)
            out["maxclaw mcp"] = await mcp_calls(app, log)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.client_paths",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--database-url")
    args = parser.parse_args(argv)
    with fresh_database(args.database_url) as url:
        print(json.dumps(roundtrip.run_async(measure(url)), indent=1))


if __name__ == "__main__":
    main()
