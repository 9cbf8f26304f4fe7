"""The agent API's shapes as pydantic models: the routes answer with them and
``maxclaw.client`` parses with them, so both sides agree on one definition.

Models of objects other capabilities own (Thread, Message, Component, Decision) declare only
the fields of ``api.md`` and keep unknown ones (``extra="allow"``): the API may add fields.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class FunctionCall(BaseModel):
    name: str
    arguments: str  # a JSON string, as Chat Completions sends it


class ToolCall(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(BaseModel):
    """One message in the OpenAI Chat Completions shape."""

    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    def wire(self) -> dict[str, Any]:
        """The dict a Chat Completions request carries (keys that do not apply left out)."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [c.model_dump() for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        return out


class Thread(_Open):
    id: str
    kind: str
    category: str | None = None
    title: str = ""
    turn_state: str = "idle"
    created_at: datetime | None = None
    rev: int = 0
    # derived from runtime state: "running" | "waiting for you" | "idle"; unsettled questions
    state: str = "idle"
    open_cards: int = 0


class Turn(BaseModel):
    id: int
    thread_id: str
    lease_until: datetime


class Claim(BaseModel):
    """``POST /v1/agent/turns/claim``: the turn, its thread and the model-facing history."""

    turn: Turn
    thread: Thread
    messages: list[ChatMessage]
    # the window is capped: history(before_id=next_before_id) reads the rows before it
    next_before_id: int | None = None


class Lease(BaseModel):
    lease_until: datetime


class Delivery(BaseModel):
    """``inbox`` and ``history``: model-facing messages."""

    messages: list[ChatMessage]


class History(Delivery):
    """``history``: one model window; ``next_before_id`` reads the one before (null: none)."""

    next_before_id: int | None = None


class Finished(BaseModel):
    open_components: list[str]
    requeued: bool


class ClaimRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    wait_s: float = Field(default=0, ge=0, le=30)
    runtime_id: str | None = Field(default=None, max_length=200)


class Posted(_Open):
    """``POST /v1/agent/threads/{id}/messages``."""

    id: int
    guard: str | None = None


class Executed(_Open):
    """``POST /v1/agent/threads/{id}/tool-calls/{call}/execute``."""

    tool_call_id: str
    content: Any = None


class ToolSpec(_Open):
    type: str = "function"
    function: dict[str, Any]


class Message(_Open):
    """A timeline row as user clients see it."""

    id: int
    thread_id: str
    role: str
    body: str | None = None
    content: Any = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    display: Any = None
    source_meta: Any = None
    components: list[dict[str, Any]] | None = None
    created_at: datetime | None = None
    rev: int = 0


class Component(_Open):
    id: str
    kind: str
    title: str = ""
    question: str = ""
    status: str = "open"
    answer: Any = None
    answered_by: str | None = None
    answered_via: str | None = None
    thread_id: str | None = None
    posted_at: datetime | None = None
    answered_at: datetime | None = None
    seen_at: datetime | None = None
    withdrawn_reason: str | None = None
    superseded_by: str | None = None


class Decision(_Open):
    id: int
    kind: str = "agent-question"
    status: str = "open"
    component_id: str | None = None
    thread_id: str | None = None
    title: str = ""
    body: str = ""
    options: list[dict[str, Any]] = Field(default_factory=list)
