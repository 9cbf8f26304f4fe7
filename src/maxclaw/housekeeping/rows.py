"""Typed rows of the housekeeping store."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from maxclaw.db.rows import Row


@dataclass(frozen=True, slots=True)
class DecisionRef(Row):
    """A decision of a thread being deleted: what its withdraw push needs."""

    id: int
    component_id: str | None
    status: str


@dataclass(frozen=True, slots=True)
class UserSummary(Row):
    """``maxclaw user list``: a user and how much it holds."""

    id: str
    name: str
    created_at: datetime
    threads: int
    tokens: int
    devices: int
    running_turns: int


@dataclass(frozen=True, slots=True)
class MeCounts(Row):
    """``GET /v1/me``'s counts."""

    created_at: datetime
    threads: int
    archived_threads: int
    devices: int
    tokens: int
