"""What clients see of threads and messages (REST and WebSocket use the same functions).

A sensitive user row (a secret answer) is shown with ``body: null``; an agent row that echoed a
secret shows its masked copy (``••••[card …]``). Plaintext is sealed in ``message_secrets`` and
opened only for the model (``maxclaw.secrets``).
"""

from __future__ import annotations

from typing import Any

from maxclaw.cards.definitions import cached_definitions
from maxclaw.timefmt import rfc3339, rfc3339_or_none
from maxclaw.timeline.rows import MessageRow, ThreadRow

SECRET_LINE = "Submitted (not echoed)"


# A thread's derived state, judged from runtime state only (never from what the model said).
RUNNING = "running"
WAITING = "waiting for you"
BACKGROUND = "working in the background"
IDLE = "idle"


def thread_state(turn_state: str, open_cards: int, background_jobs: int) -> str:
    """``running`` while a turn is queued or running (the agent has the floor), ``waiting for
    you`` when no turn is active and questions are unsettled, ``working in the background``
    when neither but a background job the runtime reported started has not finished, else
    ``idle``: the thread is done only when no turn and no job runs. Max's questions come before
    the jobs: they need him, the jobs do not."""
    if turn_state in ("queued", "running"):
        return RUNNING
    if open_cards > 0:
        return WAITING
    return BACKGROUND if background_jobs > 0 else IDLE


def thread_projection(row: ThreadRow) -> dict[str, Any]:
    return {
        "id": row.id, "kind": row.kind, "category": row.category, "title": row.title,
        "turn_state": row.turn_state, "created_at": rfc3339(row.created_at),
        "rev": row.rev, "open_cards": row.open_cards, "background_jobs": row.background_jobs,
        "state": thread_state(row.turn_state, row.open_cards, row.background_jobs),
        "archived_at": rfc3339_or_none(row.archived_at),
    }


def message_projection(row: MessageRow) -> dict[str, Any]:
    """The client-facing message: never a sensitive body; cards' definitions on assistant rows."""
    tool_calls = row.tool_calls
    components = (cached_definitions(row.id, tool_calls)
                  if row.role == "assistant" and tool_calls else None)
    return {
        "id": row.id,
        "thread_id": row.thread_id,
        "role": row.role,
        # a secret answer: no body at all; an agent row that echoed a secret: its masked copy
        "body": None if row.sensitive and row.role == "user" else row.body,
        "content": row.content,
        "tool_calls": tool_calls,
        "tool_call_id": row.tool_call_id,
        "display": row.display,
        "source_meta": row.source_meta,
        "components": components,
        "created_at": rfc3339(row.created_at),
        "rev": row.rev,
    }
