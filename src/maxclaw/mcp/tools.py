"""The MCP tools: names, descriptions and input schemas.

``ask_user_question``'s input schema is generated from ``CardArgs``, the pydantic model the
REST ``execute`` validates the same arguments with, so the schema an MCP host shows its model
and the parser that judges the call cannot drift apart.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel, ConfigDict

from maxclaw.cards.definitions import ASK_TOOL, CardArgs

GET_ANSWERS = "get_answers"
LIST_QUESTIONS = "list_questions"
TOOL_NAMES = (ASK_TOOL, GET_ANSWERS, LIST_QUESTIONS)

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


class NoArguments(BaseModel):
    """``get_answers`` and ``list_questions`` take nothing: the thread is the session's."""

    model_config = ConfigDict(extra="forbid")


def inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """A JSON Schema with its ``$defs`` references replaced by the definitions themselves
    (some agent hosts do not resolve ``$ref``); pydantic's titles are dropped as noise."""
    defs = schema.get("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return walk(copy.deepcopy(defs[ref.removeprefix("#/$defs/")]))
            return {k: walk(v) for k, v in node.items() if k not in ("$defs", "title")}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    out: dict[str, Any] = walk(schema)
    return out


def input_schema(model: type[BaseModel]) -> dict[str, Any]:
    return inline_refs(model.model_json_schema())


def tool_definitions() -> list[dict[str, Any]]:
    """``[{"name", "description", "inputSchema"}]`` for the three tools."""
    return [
        {"name": ASK_TOOL, "description": ASK_DESCRIPTION, "inputSchema": input_schema(CardArgs)},
        {"name": GET_ANSWERS, "description": GET_ANSWERS_DESCRIPTION,
         "inputSchema": input_schema(NoArguments)},
        {"name": LIST_QUESTIONS, "description": LIST_QUESTIONS_DESCRIPTION,
         "inputSchema": input_schema(NoArguments)},
    ]
