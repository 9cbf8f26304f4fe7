"""The rows ``turns.store`` returns (see ``maxclaw.db.rows``); its message reads return
``timeline.rows.MessageRow``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from maxclaw.db.rows import Row


@dataclass(frozen=True, slots=True)
class TurnRow(Row):
    """``TURN_COLUMNS`` of ``turns``."""

    id: int
    user_id: str
    thread_id: str
    status: str  # queued | running | done | lapsed
    runtime_id: str | None
    lease_until: datetime | None
    created_at: datetime
    claimed_at: datetime | None
    finished_at: datetime | None
    delivered_through: int  # the highest message id a model of this turn has been handed
    forged_requeue: bool  # queued only so the model hears of a forged notice


@dataclass(frozen=True, slots=True)
class PickedTurn(Row):
    """A queued turn ``pick_next`` locked for a claim."""

    id: int
    thread_id: str


@dataclass(frozen=True, slots=True)
class LapsedTurn(Row):
    """A running turn whose lease ran out, now ``lapsed``."""

    id: int
    user_id: str
    thread_id: str
