"""The rows the push stores return (see ``maxclaw.db.rows``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from maxclaw.db.rows import Row


@dataclass(frozen=True, slots=True)
class ActionTokenRow(Row):
    """A push action token found by its hash, with its decision's state."""

    id: int
    user_id: str
    decision_id: int
    device_id: int
    expires_at: datetime
    used_at: datetime | None
    revoked_at: datetime | None
    scope: str  # 'answer' (a question's buttons), 'revoke' (Main's answer's Revoke), 'retract'
    decision_status: str
    settled_via: str | None
    component_id: str | None


@dataclass(frozen=True, slots=True)
class DeviceRow(Row):
    """A registered device as the user sees it (configs only: secrets stay in the table)."""

    id: int
    platform: str  # webpush | apns | webhook | log
    config: dict[str, object]
    created_at: datetime


@dataclass(frozen=True, slots=True)
class ClaimedRow(Row):
    """An outbox row a dispatcher claimed (``CLAIM_DUE``), with the device it goes to."""

    id: int
    user_id: str
    device_id: int
    decision_id: int | None
    kind: str  # notify | withdraw | activity
    collapse_id: str | None
    payload: dict[str, object]
    attempts: int  # the attempt this claim made (every later write is fenced by it)
    lease_until: datetime | None
    platform: str
    config: dict[str, object]
    secret: str | None
    prefs: object = None  # his user_settings row as JSON (None: the defaults)


@dataclass(frozen=True, slots=True)
class NewPush:
    """One payload to queue for every device of its user (``enqueue_many``)."""

    user_id: str
    decision_id: int | None
    kind: str
    collapse_id: str | None
    payload: dict[str, object]
