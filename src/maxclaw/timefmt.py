"""One time format on the wire: RFC 3339 in UTC with a ``Z`` (``2026-12-01T05:30:59.123456Z``).

Every projection a client sees (REST bodies, WebSocket frames, push payloads, the states in a
card's tool row) writes its instants through ``rfc3339``, so the same instant is the same
string everywhere and a client may compare them as strings. pydantic's own serialisation (the
wire models) writes the same form.
"""

from __future__ import annotations

from datetime import UTC, datetime


def rfc3339(value: datetime) -> str:
    """``value`` (timezone-aware) as RFC 3339 in UTC with a ``Z``."""
    if value.tzinfo is None:
        raise ValueError("a naive datetime has no place on the wire: attach a timezone")
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def rfc3339_or_none(value: datetime | None) -> str | None:
    return None if value is None else rfc3339(value)
