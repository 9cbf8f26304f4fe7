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
- ``tool_says``: every listed text appears in some tool result (a script branches on what a
  tool returned: Main answers only once read_thread showed what Max said);
- ``tool_lacks``: none of the listed texts appears in any tool result;
- ``after``: every listed entry is used.

An entry is *used* once an assistant message in the conversation equals it (same text, same
calls and arguments), so the script's position is read from the conversation itself: a second
runtime that takes over a thread continues where the first one stopped.

An argument string ``$call:<entry id>`` (or ``$call:<entry id>:<n>`` for its n-th call) stands
for the tool call id that entry's reply carried in this conversation — the ids are made at
request time, so a script names an earlier card this way (``supersedes: ["$call:ask"]``,
``withdraw_question {tool_call_id: "$call:ask-version"}``). An entry whose reference is not
in the conversation yet is not eligible. ``repeat: true``
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
REF = "$call:"
Sig = tuple[str | None, tuple[tuple[str, str], ...]]


def _texts(value: str | list[str] | None) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


class Condition(BaseModel):
    model_config = ConfigDict(extra="forbid")

    user_says: list[str] = Field(default_factory=list)
    user_lacks: list[str] = Field(default_factory=list)
    tool_says: list[str] = Field(default_factory=list)
    tool_lacks: list[str] = Field(default_factory=list)
    after: list[str] = Field(default_factory=list)

    @field_validator("user_says", "user_lacks", "tool_says", "tool_lacks", "after",
                     mode="before")
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

    def signature(self, calls: list[tuple[str, dict[str, Any]]] | None = None) -> Sig:
        """What an assistant message carrying this reply looks like (``calls``: the calls
        with their references resolved, when the entry has any)."""
        pairs = calls if calls is not None else [(c.name, c.arguments) for c in self.tool_calls]
        return (self.content or None, tuple((name, _canonical(args)) for name, args in pairs))


class Script(BaseModel):
    model_config = ConfigDict(extra="forbid")

    replies: list[Entry]
    default: Entry = Field(default_factory=lambda: Entry(content="Nothing more to do."))


def _canonical(arguments: Any) -> str:
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False)


def _signature_of(message: dict[str, Any]) -> Sig:
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
        resolved = self._calls(entry, messages) or []
        calls = [{"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                  "function": {"name": name, "arguments": _canonical(args)}}
                 for name, args in resolved]
        return Reply(content=entry.content, tool_calls=calls)

    def _calls(self, entry: Entry, messages: list[dict[str, Any]],
               depth: int = 0) -> list[tuple[str, dict[str, Any]]] | None:
        """The entry's calls with every ``$call:`` reference resolved against ``messages``;
        None while a referenced entry has not replied in this conversation."""
        if depth > len(self.script.replies):
            return None  # a reference cycle never resolves
        missing = False

        def resolve(value: Any) -> Any:
            nonlocal missing
            if isinstance(value, str) and value.startswith(REF):
                found = self._call_id(value[len(REF):], messages, depth)
                missing = missing or found is None
                return found
            if isinstance(value, list):
                return [resolve(v) for v in value]
            if isinstance(value, dict):
                return {k: resolve(v) for k, v in value.items()}
            return value

        calls = [(c.name, resolve(c.arguments)) for c in entry.tool_calls]
        return None if missing else calls

    def _call_id(self, ref: str, messages: list[dict[str, Any]], depth: int) -> str | None:
        """The id of call ``n`` (default 0) of the reply entry ``ref`` gave here."""
        name, _, index = ref.partition(":")
        entry = next((e for e in self.script.replies if e.id == name), None)
        calls = self._calls(entry, messages, depth + 1) if entry is not None else None
        if entry is None or calls is None:
            return None
        wanted = entry.signature(calls)
        for message in messages:
            if message.get("role") == "assistant" and _signature_of(message) == wanted:
                made = message.get("tool_calls") or []
                n = int(index) if index.isdigit() else 0
                return str(made[n]["id"]) if n < len(made) else None
        return None

    def choose(self, messages: list[dict[str, Any]]) -> Entry:
        """The first unused entry whose condition holds for ``messages``."""
        said = [str(m.get("content") or "") for m in messages if m.get("role") == "user"]
        results = [str(m.get("content") or "") for m in messages if m.get("role") == "tool"]
        written = {_signature_of(m) for m in messages if m.get("role") == "assistant"}
        resolved = {id(e): self._calls(e, messages) for e in self.script.replies}
        signatures = {id(e): e.signature(calls) for e in self.script.replies
                      if (calls := resolved[id(e)]) is not None}
        used = {e.id for e in self.script.replies
                if e.id and signatures.get(id(e)) in written}
        for entry in self.script.replies:
            if id(entry) not in signatures:
                continue  # it names a card not posted yet
            if not entry.repeat and signatures[id(entry)] in written:
                continue
            cond = entry.when
            if not all(any(t in s for s in said) for t in cond.user_says):
                continue
            if any(t in s for t in cond.user_lacks for s in said):
                continue
            if not all(any(t in r for r in results) for t in cond.tool_says):
                continue
            if any(t in r for t in cond.tool_lacks for r in results):
                continue
            if not set(cond.after) <= used:
                continue
            return entry
        return self.script.default

    async def aclose(self) -> None:
        return None
