"""A scripted model: replies from a JSON or YAML file, for tests and the demo.

    replies:
      - id: ask                       # a name, for ``after`` and for reading logs
        tool_calls:
          - name: ask_user_question
            arguments: {title: Rename status, questions: [...]}
      - id: survey
        content: Reading the callers while the question is open.
        tool_calls: [{name: read_file, arguments: {path: orders.py}}]
      - id: keep
        when: {user_says: "Chose: Keep one version"}
        tool_calls: [{name: write_file, arguments: {path: orders.py, content: ...}}]
      - id: wait
        when: {user_lacks: "Answer to"}
        content: Surveyed every caller; the change itself needs your answer on the card.
        repeat: true
    default: {content: Nothing more to do.}

At each request the model answers with the first entry that is not used yet and whose ``when``
holds for the conversation it was given:

- ``user_says``: every listed text appears in some user message (answers and events reach
  the model as user messages, so a script can branch on whether an answer has arrived);
- ``user_lacks``: none of the listed texts appears in any user message;
- ``after``: every listed entry is used.

An entry is *used* once an assistant message in the conversation equals it (same text, same
calls and arguments), so the script's position is read from the conversation itself: a second
runtime that takes over a thread continues where the first one stopped. ``repeat: true``
entries are never used up. ``delay_s`` makes the request take that long (the demo uses it to
look like a real model). When nothing matches, the model replies with ``default`` (no calls),
which ends the turn.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

from maxclaw.client.runtime.model import Reply

Hook = Callable[[int, list[dict[str, Any]]], Awaitable[None]]


def _texts(value: str | list[str] | None) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


class Condition(BaseModel):
    model_config = ConfigDict(extra="forbid")

    user_says: list[str] = Field(default_factory=list)
    user_lacks: list[str] = Field(default_factory=list)
    after: list[str] = Field(default_factory=list)

    @field_validator("user_says", "user_lacks", "after", mode="before")
    @classmethod
    def _listify(cls, value: Any) -> list[str]:
        return _texts(value)


class ScriptCall(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class Entry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str | None = None
    content: str | None = None
    tool_calls: list[ScriptCall] = Field(default_factory=list)
    when: Condition = Field(default_factory=Condition)
    repeat: bool = False
    delay_s: float = Field(default=0.0, ge=0, le=600)

    def signature(self) -> tuple[str | None, tuple[tuple[str, str], ...]]:
        return (self.content or None,
                tuple((c.name, _canonical(c.arguments)) for c in self.tool_calls))


class Script(BaseModel):
    model_config = ConfigDict(extra="forbid")

    replies: list[Entry]
    default: Entry = Field(default_factory=lambda: Entry(content="Nothing more to do."))


def _canonical(arguments: Any) -> str:
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False)


def _signature_of(message: dict[str, Any]) -> tuple[str | None, tuple[tuple[str, str], ...]]:
    calls = []
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        raw = fn.get("arguments") or "{}"
        try:
            args = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            args = raw
        calls.append((str(fn.get("name")), _canonical(args)))
    return (message.get("content") or None, tuple(calls))


def load_script(path: str | Path) -> Script:
    """Read a script file (YAML, of which JSON is a subset)."""
    text = Path(path).read_text(encoding="utf-8")
    return Script.model_validate(yaml.safe_load(text))


class ScriptedModel:
    """Answers from a ``Script``; records every request it was sent (``requests``)."""

    def __init__(self, script: Script, hook: Hook | None = None) -> None:
        self.script = script
        self.hook = hook  # awaited at the start of each request (tests pause the model here)
        self.requests: list[list[dict[str, Any]]] = []

    @classmethod
    def from_file(cls, path: str | Path, hook: Hook | None = None) -> ScriptedModel:
        return cls(load_script(path), hook)

    async def complete(self, messages: list[dict[str, Any]],
                       tools: list[dict[str, Any]]) -> Reply:
        self.requests.append([dict(m) for m in messages])
        if self.hook is not None:
            await self.hook(len(self.requests), messages)
        entry = self.choose(messages)
        if entry.delay_s:
            await asyncio.sleep(entry.delay_s)
        calls = [{"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                  "function": {"name": c.name, "arguments": _canonical(c.arguments)}}
                 for c in entry.tool_calls]
        return Reply(content=entry.content, tool_calls=calls)

    def choose(self, messages: list[dict[str, Any]]) -> Entry:
        """The first unused entry whose condition holds for ``messages``."""
        said = [str(m.get("content") or "") for m in messages if m.get("role") == "user"]
        written = {_signature_of(m) for m in messages if m.get("role") == "assistant"}
        used = {e.id for e in self.script.replies if e.id and e.signature() in written}
        for entry in self.script.replies:
            if not entry.repeat and entry.signature() in written:
                continue
            cond = entry.when
            if not all(any(t in s for s in said) for t in cond.user_says):
                continue
            if any(t in s for t in cond.user_lacks for s in said):
                continue
            if not set(cond.after) <= used:
                continue
            return entry
        return self.script.default

    async def aclose(self) -> None:
        return None
