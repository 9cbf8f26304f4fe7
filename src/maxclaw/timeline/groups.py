"""A window of a thread's rows cut so that no tool call is separated from its results: the
model window (``turns``) and Main's ``read_thread`` (``components``) cut the same way."""

from __future__ import annotations

from maxclaw.timeline.rows import MessageRow


def whole_groups(rows: list[MessageRow]) -> list[MessageRow]:
    """A window (rows in id order, a tail of the thread or of a page) without the oldest rows
    that would cut a tool call from its results: it starts after any tool row whose call is not
    in it, so an assistant row and its tool rows are in the same window (or page). A window
    that would be left empty (one group holds more than the cap, or the head is a result whose
    call is gone) is returned as it is: a bounded read wins over a whole group."""
    calls = {_call_id(call): i for i, row in enumerate(rows) if row.role == "assistant"
             for call in row.tool_calls or []}
    start = 0
    while True:
        # the last tool row whose call is older than the window's first row
        cut = max((i for i in range(start, len(rows)) if rows[i].role == "tool"
                   and calls.get(rows[i].tool_call_id, -1) < start), default=None)
        if cut is None:
            return rows[start:]
        if cut + 1 >= len(rows):
            return rows
        start = cut + 1


def _call_id(call: dict[str, object]) -> str | None:
    # a call's id as the runtime wrote it (a call without one matches no result)
    call_id = call.get("id")
    return call_id if isinstance(call_id, str) else None
