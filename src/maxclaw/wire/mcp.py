"""The agent API's MCP face, shared by both MCP servers (the SDK's low-level ``Server``):

- ``maxclaw mcp`` over stdio (``client/mcp_stdio.py``) answers from the REST API;
- ``/mcp`` on ``maxclaw serve`` (``mcp/streamable.py``) answers from the services in-process.

Each gives ``build_server`` a resolver that says, per request, who calls and for which thread
(a ``Binding`` on a ``Backend``); the server holds no state between requests. The tools are
``ask_user_question`` (its JSON Schema comes from the backend: the server generates it from
``CardArgs``, the model ``execute`` validates with, and REST's tool list carries the same one),
``withdraw_question`` (offered, like REST's, wherever ``ask_user_question`` is; it runs as a
tool call of the thread, as ``ask_user_question`` does), ``get_answers`` and ``list_questions``;
and in Main's thread (a Main-bound or ``--for-main`` token), Main's ``answer_for_max``,
``hand_back``, ``read_thread`` and ``list_open_questions``, which run as tool calls the same
way, with the same refusals.

Call ids: ``ask_user_question`` and the other thread tools are idempotent on the MCP request —
a request sent again (the same JSON-RPC id, in the same scope, with the same arguments) gets the
same result back instead of a second card or withdrawal. The tool call id written to the thread
is ``mcp_<sha256 of thread, scope, request id, arguments (and the tool's name but for
ask_user_question)>``; the scope is the ``maxclaw mcp`` process (stdio) or the client's
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
WITHDRAW = "withdraw_question"
GET_ANSWERS = "get_answers"
LIST_QUESTIONS = "list_questions"
ANSWER_FOR_MAX = "answer_for_max"
HAND_BACK = "hand_back"
READ_THREAD = "read_thread"
LIST_OPEN = "list_open_questions"
# Main's tools: offered where the service offers them (Main's thread, to a Main-bound or
# --for-main token), with the service's descriptions and schemas
MAIN_TOOLS = (ANSWER_FOR_MAX, HAND_BACK, READ_THREAD, LIST_OPEN)
TOOL_NAMES = (ASK, WITHDRAW, GET_ANSWERS, LIST_QUESTIONS, *MAIN_TOOLS)
# the tools that run as a tool call of the thread (an assistant row, then execute)
THREAD_TOOLS = (ASK, WITHDRAW, *MAIN_TOOLS)
CALL_ID_META = "maxclaw/call_id"
MAX_CALL_ID = 200

INSTRUCTIONS = (
    "MaxClaw lets you ask your user (Max) questions without waiting. ask_user_question posts a "
    "card and returns at once; keep working. Call get_answers at a step boundary to receive "
    "what he answered since the last delivery; list_questions shows what is still pending; "
    "withdraw_question ends a question you no longer need.")
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
# outputSchema of each tool: what its structured content holds (a refusal is
# {"error", "code"} with isError). Open objects: fields may be added, never dropped.
ASK_OUTPUT: dict[str, Any] = {"type": "object", "properties": {
    "posted": {"type": "boolean"},
    "components": {"type": "array", "items": {"type": "object", "properties": {
        "id": {"type": "string"}, "kind": {"type": "string"},
        "answer_due_at": {"type": ["string", "null"]}}}},
    "note": {"type": "string"}, "error": {"type": "string"}, "code": {"type": "string"}}}
ANSWERS_OUTPUT: dict[str, Any] = {"type": "object", "properties": {
    "messages": {"type": "array", "items": {"type": "object", "properties": {
        "role": {"type": "string"}, "content": {"type": ["string", "null"]}}}},
    "error": {"type": "string"}, "code": {"type": "string"}}}
# withdraw_question: the ids this call withdrew and those withdrawn before (a repeat); a
# refusal (a settled question) is {"withdrawn": false, "error"} with isError
WITHDRAW_OUTPUT: dict[str, Any] = {"type": "object", "properties": {
    "withdrawn": {"type": ["array", "boolean"], "items": {"type": "string"}},
    "component_ids": {"type": "array", "items": {"type": "string"}},
    "already_withdrawn": {"type": "array", "items": {"type": "string"}},
    "error": {"type": "string"}, "code": {"type": "string"}}}
QUESTIONS_OUTPUT: dict[str, Any] = {"type": "object", "properties": {
    "components": {"type": "array", "items": {"type": "object", "properties": {
        "id": {"type": "string"}, "kind": {"type": "string"}, "status": {"type": "string"}}}},
    "error": {"type": "string"}, "code": {"type": "string"}}}


# Main's tools' results (docs/api.md, "Results written as the tool row's content"); a refusal
# is {"<verb>": false, "error"} with isError
MAIN_OUTPUT: dict[str, dict[str, Any]] = {
    ANSWER_FOR_MAX: {"type": "object", "properties": {
        "answered": {"type": "boolean"}, "component_id": {"type": "string"},
        "error": {"type": "string"}, "code": {"type": "string"}}},
    HAND_BACK: {"type": "object", "properties": {
        "handed_back": {"type": "boolean"}, "component_id": {"type": "string"},
        "error": {"type": "string"}, "code": {"type": "string"}}},
    READ_THREAD: {"type": "object", "properties": {
        "thread_id": {"type": "string"}, "title": {"type": "string"},
        "note": {"type": "string"}, "messages": {"type": "array", "items": {"type": "object"}},
        "before_id": {"type": ["integer", "null"]}, "read": {"type": "boolean"},
        "error": {"type": "string"}, "code": {"type": "string"}}},
    LIST_OPEN: {"type": "object", "properties": {
        "note": {"type": "string"}, "questions": {"type": "array", "items": {"type": "object"}},
        "more": {"type": "boolean"}, "listed": {"type": "boolean"},
        "error": {"type": "string"}, "code": {"type": "string"}}},
}
# what each of Main's tools does to what Max sees: answering or handing back moves his card (a
# repeated request replays its result); reading changes nothing
MAIN_HINTS: dict[str, tuple[bool, bool]] = {  # name -> (read_only, destructive)
    ANSWER_FOR_MAX: (False, False), HAND_BACK: (False, False),
    READ_THREAD: (True, False), LIST_OPEN: (True, False)}


class Refused(Exception):
    """The call could not be made at all (not a tool result): ``code`` and a sentence."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Backend(Protocol):
    """What the tools run on; every method raises ``Refused`` for a call that cannot be made."""

    async def thread_tools(self, thread_id: str) -> dict[str, tuple[str, dict[str, Any]]]:
        """The ``THREAD_TOOLS`` the thread offers: name → (description, input schema)."""
        ...

    async def run(self, thread_id: str, call_id: str, name: str,
                  arguments: dict[str, Any]) -> tuple[int, Any]:
        """``(status, content)`` of ``execute`` for the call (written first if it is new)."""
        ...

    async def get_answers(self, thread_id: str) -> dict[str, Any]: ...

    async def list_questions(self, thread_id: str) -> dict[str, Any]: ...


def assistant_row(call_id: str, arguments: dict[str, Any], name: str = ASK) -> dict[str, Any]:
    """The assistant row an MCP call of a thread tool is written as (outside any turn)."""
    return {"role": "assistant", "content": None, "turn_id": None, "tool_calls": [
        {"id": call_id, "type": "function",
         "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}}]}


def offered_thread_tools(offered: list[dict[str, Any]]) -> dict[str, tuple[str, dict[str, Any]]]:
    """The ``THREAD_TOOLS`` among a thread's tool list (REST's ``GET /v1/agent/tools`` shape)."""
    out: dict[str, tuple[str, dict[str, Any]]] = {}
    for tool in offered:
        function = tool["function"]
        if function["name"] in THREAD_TOOLS:
            out[function["name"]] = (str(function["description"]), function["parameters"])
    return out


@dataclass(frozen=True)
class Binding:
    """Who calls, for which thread, and what makes a request id unique."""

    backend: Backend
    thread_id: str
    scope: str


Resolver = Callable[["ServerRequestContext[Any, Any]"], Awaitable[Binding]]


def call_id_for(binding: Binding, request_id: Any, meta: Any,
                arguments: dict[str, Any], name: str = ASK) -> str:
    """The tool call id of an MCP ``tools/call`` (see the module's docstring)."""
    given = meta.get(CALL_ID_META) if isinstance(meta, dict) else None
    if isinstance(given, str) and 1 <= len(given) <= MAX_CALL_ID:
        return given
    # the tool's name is part of the key except for ask_user_question, whose ids predate it
    parts: list[Any] = [binding.thread_id, binding.scope, str(request_id), arguments]
    key = json.dumps(parts if name == ASK else [*parts, name],
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
            offered = await binding.backend.thread_tools(binding.thread_id)
        except Refused as exc:
            raise MCPError(INVALID_PARAMS, exc.message) from None
        # hints: asking writes a card (a repeated request replays it: idempotent); withdrawing
        # ends a question (again: a no-op); the two readers change nothing Max sees
        # (get_answers only advances the delivery mark)
        tools = []
        if ASK in offered:
            tools.append(types.Tool(name=ASK, description=ASK_DESCRIPTION,
                                    input_schema=offered[ASK][1], output_schema=ASK_OUTPUT,
                                    annotations=types.ToolAnnotations(
                                        read_only_hint=False, destructive_hint=False,
                                        idempotent_hint=True, open_world_hint=False)))
        if WITHDRAW in offered:
            description, schema = offered[WITHDRAW]
            tools.append(types.Tool(name=WITHDRAW, description=description,
                                    input_schema=schema, output_schema=WITHDRAW_OUTPUT,
                                    annotations=types.ToolAnnotations(
                                        read_only_hint=False, destructive_hint=True,
                                        idempotent_hint=True, open_world_hint=False)))
        for name in (n for n in MAIN_TOOLS if n in offered):
            description, schema = offered[name]
            read_only, destructive = MAIN_HINTS[name]
            tools.append(types.Tool(name=name, description=description, input_schema=schema,
                                    output_schema=MAIN_OUTPUT[name],
                                    annotations=types.ToolAnnotations(
                                        read_only_hint=read_only, destructive_hint=destructive,
                                        idempotent_hint=True, open_world_hint=False)))
        tools += [types.Tool(name=GET_ANSWERS, description=GET_ANSWERS_DESCRIPTION,
                             input_schema=NO_ARGUMENTS, output_schema=ANSWERS_OUTPUT,
                             annotations=types.ToolAnnotations(read_only_hint=True,
                                                               open_world_hint=False)),
                  types.Tool(name=LIST_QUESTIONS, description=LIST_QUESTIONS_DESCRIPTION,
                             input_schema=NO_ARGUMENTS, output_schema=QUESTIONS_OUTPUT,
                             annotations=types.ToolAnnotations(read_only_hint=True,
                                                               idempotent_hint=True,
                                                               open_world_hint=False))]
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: ServerRequestContext[Any, Any],
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name not in TOOL_NAMES:
            raise MCPError(INVALID_PARAMS, f"Unknown tool {params.name!r}: MaxClaw offers "
                           f"{', '.join(TOOL_NAMES)}.")
        binding = await resolve(ctx)
        arguments = params.arguments or {}
        try:
            if params.name in THREAD_TOOLS:
                call_id = call_id_for(binding, ctx.request_id, ctx.meta, arguments,
                                      params.name)
                status, content = await binding.backend.run(binding.thread_id, call_id,
                                                            params.name, arguments)
                return result(content, is_error=status >= 400)
            if params.name == GET_ANSWERS:
                return result(await binding.backend.get_answers(binding.thread_id))
            return result(await binding.backend.list_questions(binding.thread_id))
        except Refused as exc:
            return result({"error": exc.message, "code": exc.code}, is_error=True)

    return Server("maxclaw", version="0.1.0", instructions=INSTRUCTIONS,
                  on_list_tools=list_tools, on_call_tool=call_tool)
