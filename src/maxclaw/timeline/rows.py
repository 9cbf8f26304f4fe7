"""The rows ``timeline.store`` (and the turn store's message reads) return, and the input rows
it takes in bulk (see ``maxclaw.db.rows``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from maxclaw.db.rows import Row


@dataclass(frozen=True, slots=True)
class ThreadRow(Row):
    """``THREAD_COLUMNS`` of ``threads``."""

    id: str
    user_id: str
    kind: str  # main | agent
    category: str | None
    title: str
    turn_state: str  # idle | queued | running (mirrored from turns by a trigger)
    open_cards: int  # unsettled questions (kept by a trigger on message_components, 0006)
    background_jobs: int  # background jobs reported started and not finished (0017)
    created_at: datetime
    rev: int
    archived_at: datetime | None = None  # hidden from the list since then (0021)


@dataclass(frozen=True, slots=True)
class MessageRow(Row):
    """``MESSAGE_COLUMNS`` of ``messages``: one row of a thread's timeline. ``content`` is any
    JSON value (a tool's result); the other JSON columns are objects or lists of them."""

    id: int
    user_id: str
    thread_id: str
    role: str  # user | assistant | tool | event
    body: str | None
    content: object
    tool_calls: list[dict[str, object]] | None
    tool_call_id: str | None
    display: dict[str, object] | None
    source_meta: dict[str, object] | None
    sensitive: bool
    turn_id: int | None
    delivered_at: datetime | None
    created_at: datetime
    rev: int


@dataclass(frozen=True, slots=True)
class InputRow:
    """One input row for ``insert_inputs_and_wake`` (many threads, one statement)."""

    user_id: str
    thread_id: str
    role: str  # user | event
    body: str | None
    source_meta: dict[str, object] | None


@dataclass(frozen=True)
class Sealed:
    """A sealed box (``maxclaw.secrets`` builds it) ready to insert into ``message_secrets``
    next to its message row. Defined here, with the rows it is written with, so the timeline
    store that writes it needs nothing of ``secrets`` (which reads timeline rows)."""

    kind: str  # answer | echo
    component_id: str | None
    key_id: str
    box: bytes
    expires_at: datetime
