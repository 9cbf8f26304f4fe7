"""MaxClaw's tools for a model you drive yourself: schemas as plain dicts (OpenAI Chat
Completions / Responses-style function tools, Anthropic Messages tools), a dispatcher that runs
a model's call, and LangGraph/LangChain tools (``langchain-core`` is imported only when
``langgraph_tools`` is called).

    tools = anthropic_tools()                       # pass as tools=… to messages.create
    result = run_tool(client, block.name, block.input)   # a dict: the tool_result's content
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from maxclaw_client.client import AsyncClient, Client

OPTION = {"type": "object", "required": ["id", "label"], "properties": {
    "id": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"},
    "label": {"type": "string", "maxLength": 200},
    "recommended": {"type": "boolean"}}}
QUESTION = {"type": "object", "required": ["id", "kind", "question"], "properties": {
    "id": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"},
    "kind": {"type": "string", "enum": ["choice", "text", "secret", "object"]},
    "question": {"type": "string", "maxLength": 2000},
    "options": {"type": "array", "items": OPTION, "minItems": 2, "maxItems": 12},
    "multiple": {"type": "boolean"},
    "allow_other": {"type": "boolean"},
    "object": {"type": "object"},
    "actions": {"type": "array", "items": OPTION}}}
SPECS: dict[str, tuple[str, dict[str, Any]]] = {
    "ask_user_question": (
        "Ask Max (the user) something only he can decide. Returns at once with {posted: true}: "
        "keep working on what does not need the answer; it arrives later as a message "
        "(get_answers). Do not wait, poll in a loop or ask again.",
        {"type": "object", "required": ["title", "questions"], "properties": {
            "title": {"type": "string", "maxLength": 200},
            "questions": {"type": "array", "items": QUESTION, "minItems": 1, "maxItems": 8},
            "stakes": {"type": "string", "enum": ["normal", "irreversible"]},
            "main_after_minutes": {"type": "integer", "minimum": 0, "maximum": 10080}}}),
    "get_answers": (
        "What arrived since the last delivery: Max's answers (each names its card) and other "
        "messages. Never waits; [] when nothing arrived. Each message is delivered once.",
        {"type": "object", "properties": {}}),
    "list_questions": (
        "The cards of this conversation and their states, to know what is still pending.",
        {"type": "object", "properties": {}}),
    "withdraw_question": (
        "Withdraw a card Max has not answered (it no longer matters, or you found out).",
        {"type": "object", "properties": {
            "component_id": {"type": "string"}, "tool_call_id": {"type": "string"},
            "reason": {"type": "string"}}}),
}
NAMES = tuple(SPECS)


def openai_tools(names: tuple[str, ...] = NAMES) -> list[dict[str, Any]]:
    """Chat Completions function tools: ``{"type": "function", "function": {…}}``."""
    return [{"type": "function", "function": {"name": n, "description": SPECS[n][0],
                                              "parameters": SPECS[n][1]}} for n in names]


def anthropic_tools(names: tuple[str, ...] = NAMES) -> list[dict[str, Any]]:
    """Anthropic Messages tools: ``{"name", "description", "input_schema"}``."""
    return [{"name": n, "description": SPECS[n][0], "input_schema": SPECS[n][1]}
            for n in names]


def _ask_kwargs(arguments: dict[str, Any]) -> dict[str, Any]:
    rest = {k: v for k, v in arguments.items() if k not in ("title", "questions")}
    return {"title": arguments.get("title"), "questions": arguments.get("questions"), **rest}


def run_tool(client: Client, name: str, arguments: dict[str, Any] | None) -> dict[str, Any]:
    """Run a model's call of one of these tools; the dict is the tool result's content. A
    refusal is an ``APIError``: ``str(exc)`` reads well as a tool result the model can fix."""
    arguments = arguments or {}
    if name == "ask_user_question":
        return client.ask(**_ask_kwargs(arguments)).raw
    if name == "get_answers":
        return {"messages": client.answers()}
    if name == "list_questions":
        return {"components": client.questions()}
    if name == "withdraw_question":
        return client.withdraw(arguments.get("component_id"),
                               tool_call_id=arguments.get("tool_call_id"),
                               reason=arguments.get("reason") or "no longer needed")
    raise ValueError(f"no MaxClaw tool named {name!r}")


async def arun_tool(client: AsyncClient, name: str,
                    arguments: dict[str, Any] | None) -> dict[str, Any]:
    """``run_tool`` for the ``AsyncClient``."""
    arguments = arguments or {}
    if name == "ask_user_question":
        return (await client.ask(**_ask_kwargs(arguments))).raw
    if name == "get_answers":
        return {"messages": await client.answers()}
    if name == "list_questions":
        return {"components": await client.questions()}
    if name == "withdraw_question":
        return await client.withdraw(arguments.get("component_id"),
                                     tool_call_id=arguments.get("tool_call_id"),
                                     reason=arguments.get("reason") or "no longer needed")
    raise ValueError(f"no MaxClaw tool named {name!r}")


def langgraph_tools(client: Client, names: tuple[str, ...] = NAMES) -> list[Any]:
    """LangChain ``StructuredTool``s (for LangGraph's ``ToolNode`` or ``create_react_agent``);
    needs ``pip install maxclaw-client[langgraph]``."""
    try:
        from langchain_core.tools import StructuredTool
    except ImportError as exc:
        raise ImportError("langgraph_tools needs langchain-core: "
                          "pip install 'maxclaw-client[langgraph]'") from exc

    def make(name: str) -> Any:
        def call(**arguments: Any) -> dict[str, Any]:
            return run_tool(client, name, arguments)

        return StructuredTool.from_function(func=call, name=name, description=SPECS[name][0],
                                            args_schema=SPECS[name][1])

    return [make(n) for n in names]
