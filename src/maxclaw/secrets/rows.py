"""The rows ``secrets.store`` returns (see ``maxclaw.db.rows``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from maxclaw.db.rows import Row


@dataclass(frozen=True, slots=True)
class SecretRow(Row):
    """One ``message_secrets`` row: ``sealed`` (key_id and box set) or ``expired`` (both None)."""

    message_id: int
    user_id: str
    thread_id: str
    kind: str  # answer | echo
    component_id: str | None
    key_id: str | None
    box: bytes | None
    state: str  # sealed | expired
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class LegacyPlaintextRow(Row):
    """A secret answer written before 0005, its plaintext still in ``messages.body``."""

    id: int
    user_id: str
    thread_id: str
    body: str
    created_at: datetime
    component_id: str | None
