"""What the runtime needs from a model: one Chat Completions request at a time."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class Reply:
    """The model's answer to one request: text and/or tool calls (Chat Completions shape:
    ``{"id", "type": "function", "function": {"name", "arguments": "<JSON string>"}}``)."""

    content: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)


class Model(Protocol):
    """A model adapter. ``messages`` and ``tools`` are in the Chat Completions shape."""

    async def complete(self, messages: list[dict[str, Any]],
                       tools: list[dict[str, Any]]) -> Reply: ...

    async def aclose(self) -> None: ...
