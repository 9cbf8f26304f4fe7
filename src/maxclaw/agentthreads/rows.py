"""The rows ``agentthreads.store`` returns (see ``maxclaw.db.rows``)."""

from __future__ import annotations

from dataclasses import dataclass

from maxclaw.db.rows import Row


@dataclass(frozen=True, slots=True)
class ActiveTurn(Row):
    """A thread's queued or running turn, as ``lock_active_turn`` finds it."""

    id: int
    status: str  # queued | running
