"""``maxclaw mcp``: the MCP server over stdio, talking to a MaxClaw server over REST; and
``maxclaw inbox``, a thread's delivery for command hooks.

Before it serves, it checks what it was given — the server answers, the token is an agent
token, the thread exists (or ``--new-thread`` creates one) — and otherwise exits non-zero with
one line on stderr, so an agent host shows why its MCP server did not start. stdout carries
only MCP messages; logs go to stderr.

The REST backend does what ``/mcp``'s service backend does in-process (``mcp/backend.py``):
``run`` posts the call of ``ask_user_question`` or ``withdraw_question`` as an assistant row
with ``"execute": true`` — one request, one transaction; a call id sent again replays its
stored result; ``get_answers`` is ``POST
/v1/agent/threads/{id}/inbox``; ``list_questions`` is ``GET
/v1/agent/threads/{id}/components``; the thread tools' schemas are the ones ``GET
/v1/agent/tools`` offers for the thread.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import httpx

from maxclaw.client.http import AgentClient, ApiError
from maxclaw.wire.mcp import Binding, Refused, assistant_row, build_server, offered_thread_tools
from maxclaw.wire.models import Posted


class StartError(Exception):
    """Why ``maxclaw mcp`` (or ``maxclaw inbox``) cannot go on (one sentence for stderr)."""


class RestBackend:
    """The tools over HTTP with an agent token."""

    def __init__(self, client: AgentClient) -> None:
        self.client = client

    def _away(self, exc: httpx.HTTPError) -> Refused:
        return Refused("unavailable", f"MaxClaw at {self.client.http.base_url} cannot be "
                       f"reached ({type(exc).__name__}); try again later.")

    async def _call(self, method: str, path: str, *, json_body: Any = None) -> Any:
        try:
            return (await self.client._request(method, path, json=json_body)).json()
        except ApiError as exc:
            raise Refused(exc.code, exc.message) from None
        except httpx.HTTPError as exc:
            raise self._away(exc) from None

    async def thread_tools(self, thread_id: str) -> dict[str, tuple[str, dict[str, Any]]]:
        offered = await self._call("GET", f"/v1/agent/tools?thread_id={thread_id}")
        return offered_thread_tools(offered["tools"])

    async def run(self, thread_id: str, call_id: str, name: str,
                  arguments: dict[str, Any]) -> tuple[int, Any]:
        """One request: the call's assistant row posted with ``"execute": true`` (docs/api.md),
        its result read from the answer. A call id sent again replays its stored result."""
        row = {**assistant_row(call_id, arguments, name), "execute": True}
        posted = Posted.model_validate(await self._call(
            "POST", f"/v1/agent/threads/{thread_id}/messages", json_body=row))
        for result in posted.results or []:
            if result.tool_call_id == call_id:
                return result.status, result.content
        raise Refused("unavailable", f"MaxClaw at {self.client.http.base_url} answered "
                      "without the call's result; try again later.")

    async def get_answers(self, thread_id: str) -> dict[str, Any]:
        result: dict[str, Any] = await self._call("POST",
                                                  f"/v1/agent/threads/{thread_id}/inbox")
        return result

    async def list_questions(self, thread_id: str) -> dict[str, Any]:
        result: dict[str, Any] = await self._call(
            "GET", f"/v1/agent/threads/{thread_id}/components")
        return result


async def _check(client: AgentClient, url: str, method: str, path: str,
                 body: Any = None) -> Any:
    try:
        resp = await client._request(method, path, json=body)
    except ApiError as exc:
        if exc.status == 401:
            raise StartError(f"{url} refused the token ({exc.message})") from None
        if exc.status == 403:
            raise StartError(f"{url}: {exc.message} (an agent token is needed: "
                             "maxclaw token create --role agent)") from None
        if exc.status == 404:
            raise StartError(f"{url}: no such thread for this token") from None
        raise StartError(f"{url} answered {exc.status} {exc.code}: {exc.message}") from None
    except httpx.HTTPError as exc:
        raise StartError(f"cannot reach MaxClaw at {url} ({type(exc).__name__}: {exc})") \
            from None
    return resp.json()


async def prepare(client: AgentClient, url: str, thread_id: str | None,
                  new_thread: str | None) -> str:
    """The thread this server serves; raises ``StartError``."""
    if (thread_id is None) == (new_thread is None):
        raise StartError("give exactly one of --thread ID and --new-thread TITLE")
    if new_thread is not None:
        created = await _check(client, url, "POST", "/v1/agent/threads", {"title": new_thread})
        return str(created["id"])
    assert thread_id is not None
    await _check(client, url, "GET", f"/v1/agent/threads/{thread_id}/components?limit=1")
    return thread_id


async def serve_stdio(url: str, token: str, thread_id: str | None, new_thread: str | None,
                      announce: Callable[[str], None]) -> None:
    """Serve MCP on stdin/stdout until the host closes stdin."""
    from mcp.server.stdio import stdio_server

    async with AgentClient(url, token, retries=2) as client:
        thread = await prepare(client, url, thread_id, new_thread)
        if new_thread is not None:
            announce(f"maxclaw mcp: created thread {thread} ({new_thread!r})")
        binding = Binding(RestBackend(client), thread, scope=uuid.uuid4().hex)

        async def resolve(_ctx: Any) -> Binding:
            return binding

        server = build_server(resolve)
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())


async def take_inbox(url: str, token: str, thread_id: str) -> list[dict[str, Any]]:
    """``maxclaw inbox``: the thread's delivery; raises ``StartError``."""
    async with AgentClient(url, token, retries=2) as client:
        delivered = await _check(client, url, "POST", f"/v1/agent/threads/{thread_id}/inbox")
    messages: list[dict[str, Any]] = delivered["messages"]
    return messages
