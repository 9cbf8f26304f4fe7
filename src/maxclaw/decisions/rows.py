"""The rows ``decisions.store`` returns, and the carriers it creates in bulk (see
``maxclaw.db.rows``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from maxclaw.db.rows import Row


@dataclass(frozen=True, slots=True)
class DecisionRow(Row):
    """``DECISION_COLUMNS`` of ``decisions`` (the realtime catch-up reads the same columns)."""

    id: int
    user_id: str
    kind: str  # agent-question
    status: str  # open | settled
    component_id: str | None  # the card it carries
    thread_id: str | None
    title: str
    body: str
    options: list[dict[str, object]]
    allow_text: bool
    sensitive: bool
    answer_text: str | None  # a placeholder for sensitive cards, never the secret
    settled_via: str | None  # a surface, main, withdrawn or expired
    bar: bool
    bar_snoozed_until: datetime | None
    created_at: datetime
    settled_at: datetime | None
    dismissed_at: datetime | None
    rev: int


@dataclass(frozen=True, slots=True)
class NewCarrier:
    """One ``agent-question`` decision to create for a card's question (``insert_carriers``,
    and ``components.post_store.post_cards`` with its push ``payload``)."""

    user_id: str
    component_id: str
    thread_id: str
    title: str
    body: str
    options: list[dict[str, object]]
    allow_text: bool
    sensitive: bool
    bar: bool
    payload: dict[str, object] = field(default_factory=dict)  # its decision_id filled in SQL
