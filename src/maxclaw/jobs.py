"""Background jobs run inside ``serve`` (sweeper, push dispatcher, realtime listener, …)."""

from __future__ import annotations

from typing import Protocol


class Job(Protocol):
    """Started after the pool opens, stopped (in reverse order) before it closes."""

    name: str

    async def start(self) -> None: ...

    async def stop(self) -> None: ...
