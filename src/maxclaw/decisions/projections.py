"""What clients see of a decision (REST, WebSocket). ``answer_text`` is already a placeholder
for sensitive cards in storage, so nothing here can leak a secret."""

from __future__ import annotations

from typing import Any

from maxclaw.decisions.rows import DecisionRow
from maxclaw.timefmt import rfc3339, rfc3339_or_none

_FIELDS = tuple(DecisionRow.__dataclass_fields__)


def decision_row(row: DecisionRow | dict[str, Any]) -> DecisionRow:
    """``row`` as a ``DecisionRow``: the realtime catch-up still hands its decisions over as
    columns by name (``realtime.store.READ_DECISIONS``: the same columns, and its cursor's)."""
    if isinstance(row, DecisionRow):
        return row
    return DecisionRow(**{k: row[k] for k in _FIELDS})


def in_panel(row: DecisionRow) -> bool:
    """Whether the decisions panel shows it: open, or answered by Main and not dismissed."""
    # every reader selects dismissed_at (REST and the realtime catch-up): a frame without it
    # would put a dismissed item back in the panel
    return row.status == "open" or (row.settled_via == "main" and row.dismissed_at is None)


def decision_projection(row: DecisionRow | dict[str, Any]) -> dict[str, Any]:
    """A decision as REST and the WebSocket send it (``api.md``)."""
    row = decision_row(row)
    return {
        "id": row.id, "kind": row.kind, "status": row.status,
        "component_id": row.component_id,
        "thread_id": str(row.thread_id) if row.thread_id is not None else None,
        "title": row.title, "body": row.body, "options": row.options,
        "allow_text": row.allow_text, "sensitive": row.sensitive,
        "answer_text": row.answer_text, "settled_via": row.settled_via, "bar": row.bar,
        "bar_snoozed_until": rfc3339_or_none(row.bar_snoozed_until),
        "created_at": rfc3339(row.created_at),
        "settled_at": rfc3339_or_none(row.settled_at), "rev": row.rev,
        # issue 16: Main's answers stay in the panel ("answered by Main", with Revoke) until
        # Max dismisses them
        "answered_by_main": row.status == "settled" and row.settled_via == "main",
        "dismissed_at": rfc3339_or_none(row.dismissed_at),
        "in_panel": in_panel(row),
    }


def decision_fields(row: DecisionRow) -> dict[str, Any]:
    """A decision's columns by name, as the push payloads read them (``push.payload``, which
    may not import this package: decisions already reads push)."""
    return {k: getattr(row, k) for k in _FIELDS}
