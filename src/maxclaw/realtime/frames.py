"""The server's WebSocket frames, as JSON text (times in RFC 3339, like the REST API)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from pydantic_core import to_jsonable_python

from maxclaw.decisions.projections import decision_projection
from maxclaw.realtime.cursor import Position, encode
from maxclaw.realtime.store import Change
from maxclaw.timefmt import rfc3339
from maxclaw.timeline.projections import message_projection, thread_projection
from maxclaw.timeline.rows import MessageRow, ThreadRow


def _default(value: Any) -> Any:
    # instants in the one wire form (``timefmt``), like the REST bodies; the rest as pydantic
    if isinstance(value, datetime):
        return rfc3339(value)
    return to_jsonable_python(value)


def dumps(frame: dict[str, Any]) -> str:
    """One frame as compact JSON text."""
    return json.dumps(frame, default=_default, ensure_ascii=False, separators=(",", ":"))


def record_frame(change: Change) -> str:
    """``record.upsert`` for one change; its cursor resumes right after this change."""
    return dumps({"type": "record.upsert", "table": change.table, "rev": change.position.rev,
                  "cursor": encode(change.position),
                  "record": _projection(change)})


def _projection(change: Change) -> dict[str, Any]:
    """The client projection of the change's row (the same functions REST uses)."""
    row = change.row
    if isinstance(row, ThreadRow):
        return thread_projection(row)
    if isinstance(row, MessageRow):
        return message_projection(row)  # a sensitive row's body is None here
    return decision_projection(row)


def hello(server_time: datetime) -> str:
    return dumps({"type": "hello", "server_time": server_time})


def synced(position: Position) -> str:
    return dumps({"type": "synced", "cursor": encode(position)})


def error(code: str, message: str) -> str:
    return dumps({"type": "error", "code": code, "message": message})


PONG = dumps({"type": "pong"})
RESYNC = dumps({"type": "resync"})


def focus_ok(thread_id: str | None) -> str:
    return dumps({"type": "focus.ok", "thread_id": thread_id})
