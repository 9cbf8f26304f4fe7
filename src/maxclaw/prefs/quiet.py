"""Quiet hours, as pure arithmetic on aware datetimes (no I/O, no clock: callers pass ``at``).

A window is ``start``-``end`` in the person's local time, e.g. 22:30-07:30; when ``end`` is
not after ``start`` it ends on the next day (it crosses midnight). ``days`` optionally limits
the windows to the ISO weekdays (1 = Monday) on which they *start*: a Friday-night window that
ends on Saturday morning belongs to Friday.

Local times become instants through ``zoneinfo``: a start or end that falls in a DST gap (02:30
on a spring-forward night) is read with the offset before the change (it lands one hour later
on the new clock); one that occurs twice (fall back) is its first occurrence. Windows are
therefore measured in real elapsed time, so a night that loses an hour is an hour shorter.

``due_after`` is the due clock: the minutes before a card goes to Main run only outside quiet
hours, so a card posted at 23:00 with 30 minutes in a 22:30-07:30 window is due at 08:00, and
one posted at 22:15 (15 minutes left when the window opens) at 07:45.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

_HHMM = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$")
# how far the window search looks: a week of days plus the day before (the window that started
# yesterday evening may still be open)
_LOOKAHEAD_DAYS = 9
# a clock of at most 10,080 minutes crosses at most eight windows; this bounds the walk
_MAX_STEPS = 64


@dataclass(frozen=True, slots=True)
class QuietHours:
    """A nightly window in local time (minutes after midnight) and, optionally, its days."""

    start: int
    end: int
    days: frozenset[int] | None = None

    def __post_init__(self) -> None:
        for name, value in (("start", self.start), ("end", self.end)):
            if not 0 <= value < 24 * 60:
                raise ValueError(f"{name} must be a time of day")
        if self.start == self.end:
            raise ValueError("start and end must differ")
        if self.days is not None and (not self.days or not self.days <= set(range(1, 8))):
            raise ValueError("days are ISO weekdays 1 (Monday) to 7 (Sunday), at least one")

    @property
    def crosses_midnight(self) -> bool:
        return self.end < self.start


def parse_hhmm(text: str) -> int:
    """``"22:30"`` → 1350 (minutes after midnight); ValueError for anything else."""
    match = _HHMM.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a time of day as HH:MM (00:00 to 23:59)")
    return int(match.group(1)) * 60 + int(match.group(2))


def format_hhmm(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name``; ValueError when there is none by that name."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:  # OSError: a path, not a zone
        raise ValueError(f"{name!r} is not an IANA time zone name") from exc


def _instant(day: date, minutes: int, tz: ZoneInfo) -> datetime:
    local = datetime.combine(day, time(minutes // 60, minutes % 60), tzinfo=tz)
    return local.astimezone(UTC)


def windows(quiet: QuietHours, tz: ZoneInfo, at: datetime) -> Iterator[tuple[datetime, datetime]]:
    """The windows that end after ``at``, in order, as ``(start, end)`` instants in UTC."""
    first = at.astimezone(tz).date() - timedelta(days=1)
    for n in range(_LOOKAHEAD_DAYS):
        day = first + timedelta(days=n)
        if quiet.days is not None and day.isoweekday() not in quiet.days:
            continue
        start = _instant(day, quiet.start, tz)
        end = _instant(day + timedelta(days=1 if quiet.crosses_midnight else 0), quiet.end, tz)
        if end > at:
            yield start, end


def window_at(quiet: QuietHours, tz: ZoneInfo, at: datetime) -> tuple[datetime, datetime] | None:
    """The window ``at`` falls in (``start <= at < end``), or None."""
    for start, end in windows(quiet, tz, at):
        if start <= at:
            return start, end
        return None
    return None


def quiet_until(quiet: QuietHours | None, tz: ZoneInfo, at: datetime) -> datetime | None:
    """When the window ``at`` falls in ends; None outside quiet hours (or with none set)."""
    if quiet is None:
        return None
    window = window_at(quiet, tz, at)
    return None if window is None else window[1]


def _next_start(quiet: QuietHours, tz: ZoneInfo, after: datetime) -> datetime | None:
    for start, _ in windows(quiet, tz, after):
        if start > after:
            return start
    return None


def due_after(start: datetime, minutes: int, quiet: QuietHours | None,
              tz: ZoneInfo) -> datetime:
    """``minutes`` of the due clock from ``start``, counted only outside quiet hours: the
    moment a card may go to Main when he has not allowed Main during them. Never inside a
    window (a clock that runs out at a window's start waits for its end)."""
    if quiet is None:
        return start + timedelta(minutes=minutes)
    t, left = start, timedelta(minutes=minutes)
    for _ in range(_MAX_STEPS):
        window = window_at(quiet, tz, t)
        if window is not None:
            t = window[1]
        nxt = _next_start(quiet, tz, t)
        if nxt is None or t + left < nxt:
            return t + left
        left -= nxt - t
        t = nxt
    return t + left  # unreachable for clocks within a week; a bound, not a rule
