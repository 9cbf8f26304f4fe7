"""The agent API's MCP face, shared by both MCP servers (the SDK's low-level ``Server``):

- ``maxclaw mcp`` over stdio (``client/mcp_stdio.py``) answers from the REST API;
- ``/mcp`` on ``maxclaw serve`` (``mcp/streamable.py``) answers from the services in-process.

Each gives ``build_server`` a resolver that says, per request, who calls and for which thread
(a ``Binding`` on a ``Backend``); the server holds no state between requests. The tools are
``ask_user_question`` (its JSON Schema comes from the backend: the server generates it from
``CardArgs``, the model ``execute`` validates with, and REST's tool list carries the same one),
``get_answers`` and ``list_questions``.

Call ids: ``ask_user_question`` is idempotent on the MCP request — a request sent again (the
same JSON-RPC id, in the same scope, with the same arguments) gets the same card back instead
of a second one. The tool call id written to the thread is ``mcp_<sha256 of thread, scope,
request id, arguments>``; the scope is the ``maxclaw mcp`` process (stdio) or the client's
``Mcp-Session-Id`` (HTTP, when it sends one). A host that has its own id for the call can pass
it as ``_meta["maxclaw/call_id"]``, and that id is used.

A shared leaf like the wire models: it imports nothing of the project (the SDK is external).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import date, datetime
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # the SDK is imported where a server is built: it takes ~1 s to import
    import mcp_types as types
    from mcp.server.context import ServerRequestContext
    from mcp.server.lowlevel.server import Server

ASK = "ask_user_question"
GET_ANSWERS = "get_answers"
LIST_QUESTIONS = "list_questions"
TOOL_NAMES = (ASK, GET_ANSWERS, LIST_QUESTIONS)
CALL_ID_META = "maxclaw/call_id"
MAX_CALL_ID = 200

INSTRUCTIONS = (
    "MaxClaw lets you ask your user (Max) questions without waiting. ask_user_question posts a "
    "card and returns at once; keep working. Call get_answers at a step boundary to receive "
    "what he answered since the last delivery; list_questions shows what is still pending.")
ASK_DESCRIPTION = (
    "Ask Max (the user) something only he can decide. Returns at once with {posted: true}: "
    "the question becomes a card in his MaxClaw conversation. Keep working on what does not "
    "need the answer. His answer does not come back from this call: get_answers returns it "
    "once it has arrived (and, where your host runs `maxclaw inbox --format hook`, it arrives "
    "by itself at your next step). Do not wait, poll in a loop or ask again.")
GET_ANSWERS_DESCRIPTION = (
    "What arrived for this conversation since the last delivery: Max's answers to your "
    "questions (each names its card), hand-offs, revokes and background events. Never waits; "
    "returns {messages: []} when nothing arrived. Each message is delivered once.")
LIST_QUESTIONS_DESCRIPTION = (
    "The cards of this conversation and their states (open, with-main, answered, "
    "main-answered, revoked, handed-back), so you know what is still pending after a restart. "
    "Secret answers are never shown here.")
NO_ARGUMENTS: dict[str, Any] = {"type": "object", "properties": {},
                                "additionalProperties": False}


class Refused(Exception):
    """The call could not be made at all (not a tool result): ``code`` and a sentence."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Backend(Protocol):
    """What the tools run on; every method raises ``Refused`` for a call that cannot be made."""

    async def ask_schema(self, thread_id: str) -> dict[str, Any] | None:
        """``ask_user_question``'s input schema, or None where the thread does not offer it."""
        ...

    async def ask(self, thread_id: str, call_id: str,
                  arguments: dict[str, Any]) -> tuple[int, Any]:
        """``(status, content)`` of ``execute`` for the call (written first if it is new)."""
        ...

    async def get_answers(self, thread_id: str) -> dict[str, Any]: ...

    async def list_questions(self, thread_id: str) -> dict[str, Any]: ...


def assistant_row(call_id: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The assistant row an MCP ``ask_user_question`` call is written as (outside any turn)."""
    return {"role": "assistant", "content": None, "turn_id": None, "tool_calls": [
        {"id": call_id, "type": "function",
         "function": {"name": ASK, "arguments": json.dumps(arguments, ensure_ascii=False)}}]}


@dataclass(frozen=True)
class Binding:
    """Who calls, for which thread, and what makes a request id unique."""

    backend: Backend
    thread_id: str
    scope: str


Resolver = Callable[["ServerRequestContext[Any, Any]"], Awaitable[Binding]]


def call_id_for(binding: Binding, request_id: Any, meta: Any,
                arguments: dict[str, Any]) -> str:
    """The tool call id of an MCP ``tools/call`` (see the module's docstring)."""
    given = meta.get(CALL_ID_META) if isinstance(meta, dict) else None
    if isinstance(given, str) and 1 <= len(given) <= MAX_CALL_ID:
        return given
    key = json.dumps([binding.thread_id, binding.scope, str(request_id), arguments],
                     sort_keys=True, ensure_ascii=False, default=str)
    return "mcp_" + hashlib.sha256(key.encode()).hexdigest()[:40]


def _plain(value: Any) -> Any:
    """JSON-ready, with times as ``isoformat`` writes them (as the REST API answers them)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, datetime | date):
        return value.isoformat()
    return value


def result(payload: Any, *, is_error: bool = False) -> types.CallToolResult:
    """A tool result: the JSON as text (what most hosts show the model) and as structured data."""
    import mcp_types as types

    data = _plain(payload)
    return types.CallToolResult(
        content=[types.TextContent(text=json.dumps(data, ensure_ascii=False))],
        structured_content=data, is_error=is_error)


def build_server(resolve: Resolver) -> Server[Any]:
    """An MCP server whose tools run on what ``resolve`` returns for each request."""
    import mcp_types as types
    from mcp.server.lowlevel.server import Server
    from mcp.shared.exceptions import MCPError
    from mcp_types.jsonrpc import INVALID_PARAMS

    async def list_tools(ctx: ServerRequestContext[Any, Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        binding = await resolve(ctx)
        try:
            schema = await binding.backend.ask_schema(binding.thread_id)
        except Refused as exc:
            raise MCPError(INVALID_PARAMS, exc.message) from None
        tools = [] if schema is None else [
            types.Tool(name=ASK, description=ASK_DESCRIPTION, input_schema=schema)]
        tools += [types.Tool(name=GET_ANSWERS, description=GET_ANSWERS_DESCRIPTION,
                             input_schema=NO_ARGUMENTS),
                  types.Tool(name=LIST_QUESTIONS, description=LIST_QUESTIONS_DESCRIPTION,
                             input_schema=NO_ARGUMENTS)]
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: ServerRequestContext[Any, Any],
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name not in TOOL_NAMES:
            raise MCPError(INVALID_PARAMS, f"Unknown tool {params.name!r}: MaxClaw offers "
                           f"{', '.join(TOOL_NAMES)}.")
        binding = await resolve(ctx)
        arguments = params.arguments or {}
        try:
            if params.name == ASK:
                call_id = call_id_for(binding, ctx.request_id, ctx.meta, arguments)
                status, content = await binding.backend.ask(binding.thread_id, call_id,
                                                            arguments)
                return result(content, is_error=status >= 400)
            if params.name == GET_ANSWERS:
                return result(await binding.backend.get_answers(binding.thread_id))
            return result(await binding.backend.list_questions(binding.thread_id))
        except Refused as exc:
            return result({"error": exc.message, "code": exc.code}, is_error=True)

    return Server("maxclaw", version="0.1.0", instructions=INSTRUCTIONS,
                  on_list_tools=list_tools, on_call_tool=call_tool)
