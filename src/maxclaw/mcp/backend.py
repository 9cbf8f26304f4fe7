"""Where the MCP tools get their answers: the REST API (stdio) or the services (``/mcp``).

Both do the same three things the same way, so the transports cannot disagree:

- ``ask``: run ``execute`` for the call id; if no assistant row carries that call yet, write
  one (``ask_user_question`` with the MCP arguments, outside any turn) and execute it. A repeated
  call id finds its stored result and replays it, refusals included — nothing new is posted.
- ``get_answers``: the thread's inbox outside a turn (``POST /v1/agent/threads/{id}/inbox``).
- ``list_questions``: the thread's cards (``GET /v1/agent/threads/{id}/components``).

A refusal that is not a tool result (no such thread, a token that may not, the server away)
raises ``Unavailable``/``Refused`` with the message for the model.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

import httpx
from fastapi.encoders import jsonable_encoder

from maxclaw.agentthreads.service import AgentThreadService
from maxclaw.auth.service import Principal
from maxclaw.cards.definitions import ASK_TOOL
from maxclaw.client.http import AgentClient, ApiError
from maxclaw.components.server_tools import ToolService
from maxclaw.errors import MaxclawError, NotFound
from maxclaw.turns.messages import AgentMessageService


class Refused(Exception):
    """The call could not be made at all (not a tool result): ``code`` and a sentence."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Backend(Protocol):
    async def ask(self, thread_id: str, call_id: str,
                  arguments: dict[str, Any]) -> tuple[int, Any]: ...

    async def get_answers(self, thread_id: str) -> dict[str, Any]: ...

    async def list_questions(self, thread_id: str) -> dict[str, Any]: ...


def _assistant_row(call_id: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "turn_id": None, "tool_calls": [
        {"id": call_id, "type": "function",
         "function": {"name": ASK_TOOL, "arguments": json.dumps(arguments, ensure_ascii=False)}}]}


class RestBackend:
    """Over HTTP with an agent token (``maxclaw mcp`` over stdio)."""

    def __init__(self, client: AgentClient) -> None:
        self.client = client

    async def _call(self, method: str, path: str, *, json_body: Any = None,
                    ok: tuple[int, ...] = (200, 201)) -> httpx.Response:
        try:
            return await self.client._request(method, path, json=json_body, ok=ok)
        except ApiError as exc:
            raise Refused(exc.code, exc.message) from None
        except httpx.HTTPError as exc:
            raise Refused("unavailable", f"MaxClaw at {self.client.http.base_url} cannot be "
                          f"reached ({type(exc).__name__}); try again later.") from None

    async def ask(self, thread_id: str, call_id: str,
                  arguments: dict[str, Any]) -> tuple[int, Any]:
        try:
            status, executed = await self.client.execute(thread_id, call_id)
        except ApiError as exc:
            if exc.status != 404:
                raise Refused(exc.code, exc.message) from None
            # no row carries the call yet (a missing thread is reported by the post)
            await self._call("POST", f"/v1/agent/threads/{thread_id}/messages",
                             json_body=_assistant_row(call_id, arguments))
            try:
                status, executed = await self.client.execute(thread_id, call_id)
            except ApiError as again:
                raise Refused(again.code, again.message) from None
        except httpx.HTTPError as exc:
            raise Refused("unavailable", f"MaxClaw at {self.client.http.base_url} cannot be "
                          f"reached ({type(exc).__name__}); try again later.") from None
        return status, executed.content

    async def get_answers(self, thread_id: str) -> dict[str, Any]:
        resp = await self._call("POST", f"/v1/agent/threads/{thread_id}/inbox")
        result: dict[str, Any] = resp.json()
        return result

    async def list_questions(self, thread_id: str) -> dict[str, Any]:
        resp = await self._call("GET", f"/v1/agent/threads/{thread_id}/components")
        result: dict[str, Any] = resp.json()
        return result


class ServiceBackend:
    """In-process, for one authenticated agent principal (``/mcp`` on ``maxclaw serve``)."""

    def __init__(self, who: Principal, tools: ToolService, messages: AgentMessageService,
                 threads: AgentThreadService) -> None:
        self.who = who
        self.tools = tools
        self.messages = messages
        self.threads = threads

    async def ask(self, thread_id: str, call_id: str,
                  arguments: dict[str, Any]) -> tuple[int, Any]:
        tools = self.tools
        try:
            try:
                status, content, _ = await tools.execute(self.who, thread_id, call_id)
            except NotFound:
                await self.messages.post(self.who, thread_id,
                                                        _assistant_row(call_id, arguments))
                status, content, _ = await tools.execute(self.who, thread_id, call_id)
        except MaxclawError as exc:
            raise Refused(exc.code, exc.message) from None
        return status, content

    async def get_answers(self, thread_id: str) -> dict[str, Any]:
        try:
            result: dict[str, Any] = await self.threads.inbox(self.who, thread_id)
        except MaxclawError as exc:
            raise Refused(exc.code, exc.message) from None
        return result

    async def list_questions(self, thread_id: str) -> dict[str, Any]:
        try:
            # encoded as the REST route encodes it, so both transports answer the same JSON
            result: dict[str, Any] = jsonable_encoder(
                await self.threads.components(self.who, thread_id))
        except MaxclawError as exc:
            raise Refused(exc.code, exc.message) from None
        return result
