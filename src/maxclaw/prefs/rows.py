"""A person's settings as the store returns them, and what they mean for a moment in time."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from maxclaw.db.rows import Row
from maxclaw.prefs import quiet as q


@dataclass(frozen=True, slots=True)
class PrefsRow(Row):
    """``user_settings``: one row per user (the defaults below for a user without one)."""

    user_id: str
    locale: str = "en"
    time_zone: str = "UTC"
    quiet_hours: dict[str, Any] | None = None
    main_may_answer_during_quiet_hours: bool = False
    quiet_push: str = "passive"  # passive | hold
    main_after_minutes: int = 30
    main_may_take_cards: bool = True
    main_timeout_minutes: int | None = None  # Main's time to decide; None: the server's default

    @property
    def tz(self) -> ZoneInfo:
        try:
            return q.zone(self.time_zone)
        except ValueError:  # a zone the system no longer knows: UTC rather than an error
            return q.zone("UTC")

    @property
    def quiet(self) -> q.QuietHours | None:
        return quiet_of(self.quiet_hours)

    def due_at(self, start: datetime, minutes: int) -> datetime:
        """A card's hand-off moment: ``minutes`` after ``start``, the clock paused during
        quiet hours unless Main may answer during them."""
        if self.main_may_answer_during_quiet_hours:
            return q.due_after(start, minutes, None, self.tz)
        return q.due_after(start, minutes, self.quiet, self.tz)

    def quiet_until(self, at: datetime) -> datetime | None:
        """The end of the quiet window ``at`` is in, or None."""
        return q.quiet_until(self.quiet, self.tz, at)


def quiet_of(value: dict[str, Any] | None) -> q.QuietHours | None:
    """The stored (already validated) quiet hours; None for none or an unreadable value."""
    if not value:
        return None
    try:
        days = value.get("days")
        return q.QuietHours(start=q.parse_hhmm(str(value["start"])),
                            end=q.parse_hhmm(str(value["end"])),
                            days=frozenset(int(d) for d in days) if days else None)
    except (KeyError, ValueError, TypeError):
        return None


PREFS_FIELDS = ("locale", "time_zone", "quiet_hours", "main_may_answer_during_quiet_hours",
                "quiet_push", "main_after_minutes", "main_may_take_cards",
                "main_timeout_minutes")


def of_json(user_id: str, value: object) -> PrefsRow:
    """The row from ``to_jsonb(user_settings)`` read inside another statement (None or its
    JSON text: the defaults when he has none)."""
    if isinstance(value, str):
        value = json.loads(value)
    if not isinstance(value, dict):
        return PrefsRow(user_id=user_id)
    return PrefsRow(user_id=user_id, **{k: value[k] for k in PREFS_FIELDS if k in value})


@dataclass(frozen=True, slots=True)
class OpenCardRow(Row):
    """One of his open cards with what its due time depends on (``store.open_cards``)."""

    id: str
    thread_id: str
    posted_at: datetime
    due_from: datetime | None
    due_at: datetime | None
    decision_id: int | None
    tool_message_id: int
    tool_calls: list[dict[str, Any]] | None
    thread_kind: str
    category: str | None
    thread_title: str


@dataclass(frozen=True, slots=True)
class DueSet(Row):
    """A card whose due time a settings change moved (``store.set_due``)."""

    id: str
    due_at: datetime | None
    expires_at: datetime | None
    tool_message_id: int
