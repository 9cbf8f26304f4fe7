"""The MCP server (the SDK's low-level ``Server``): three tools, whichever transport.

Per request a resolver says who is calling and for which thread (a ``Binding``); the tools
then run on that binding's backend. The server holds no state between requests.

Call ids: ``ask_user_question`` is idempotent on the MCP request — a request that is sent
again (the same JSON-RPC id, in the same scope, with the same arguments) gets the same card
back instead of a second one. The tool call id written to the thread is
``mcp_<sha256 of thread, scope, request id, arguments>``; the scope is the ``maxclaw mcp``
process (stdio) or the client's ``Mcp-Session-Id`` (HTTP, when it sends one). A host that has
its own id for the call can pass it as ``_meta["maxclaw/call_id"]`` and that id is used.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import INVALID_PARAMS
from pydantic_core import to_jsonable_python

from maxclaw.cards.definitions import ASK_TOOL, MAX_TOOL_CALL_ID
from maxclaw.mcp.backend import Backend, Refused
from maxclaw.mcp.tools import GET_ANSWERS, LIST_QUESTIONS, TOOL_NAMES, tool_definitions

CALL_ID_META = "maxclaw/call_id"
INSTRUCTIONS = (
    "MaxClaw lets you ask your user (Max) questions without waiting. ask_user_question posts a "
    "card and returns at once; keep working. Call get_answers at a step boundary to receive "
    "what he answered since the last delivery; list_questions shows what is still pending.")


@dataclass(frozen=True)
class Binding:
    """Who calls, for which thread, and what makes a request id unique."""

    backend: Backend
    thread_id: str
    scope: str


Resolver = Callable[[ServerRequestContext[Any, Any]], Awaitable[Binding]]


def call_id_for(binding: Binding, request_id: Any, meta: Any,
                arguments: dict[str, Any]) -> str:
    """The tool call id of an MCP ``tools/call`` (see the module's docstring)."""
    given = meta.get(CALL_ID_META) if isinstance(meta, dict) else None
    if isinstance(given, str) and 1 <= len(given) <= MAX_TOOL_CALL_ID:
        return given
    key = json.dumps([binding.thread_id, binding.scope, str(request_id), arguments],
                     sort_keys=True, ensure_ascii=False, default=str)
    return "mcp_" + hashlib.sha256(key.encode()).hexdigest()[:40]


def result(payload: Any, *, is_error: bool = False) -> types.CallToolResult:
    """A tool result: the JSON as text (what most hosts show the model) and as structured data."""
    data = to_jsonable_python(payload)
    return types.CallToolResult(
        content=[types.TextContent(text=json.dumps(data, ensure_ascii=False))],
        structured_content=data, is_error=is_error)


def build_server(resolve: Resolver) -> Server[Any]:
    """An MCP server whose tools run on what ``resolve`` returns for each request."""
    tools = [types.Tool(name=d["name"], description=d["description"],
                        input_schema=d["inputSchema"]) for d in tool_definitions()]

    async def list_tools(ctx: ServerRequestContext[Any, Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: ServerRequestContext[Any, Any],
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name not in TOOL_NAMES:
            raise MCPError(INVALID_PARAMS, f"Unknown tool {params.name!r}: MaxClaw offers "
                           f"{', '.join(TOOL_NAMES)}.")
        binding = await resolve(ctx)
        arguments = params.arguments or {}
        try:
            if params.name == ASK_TOOL:
                call_id = call_id_for(binding, ctx.request_id, ctx.meta, arguments)
                status, content = await binding.backend.ask(binding.thread_id, call_id,
                                                            arguments)
                return result(content, is_error=status >= 400)
            if params.name == GET_ANSWERS:
                return result(await binding.backend.get_answers(binding.thread_id))
            assert params.name == LIST_QUESTIONS
            return result(await binding.backend.list_questions(binding.thread_id))
        except Refused as exc:
            return result({"error": exc.message, "code": exc.code}, is_error=True)

    return Server("maxclaw", version="0.1.0", instructions=INSTRUCTIONS,
                  on_list_tools=list_tools, on_call_tool=call_tool)
