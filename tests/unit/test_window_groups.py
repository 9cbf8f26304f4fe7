"""The model window never starts between a tool call and its results (turns.history)."""

from __future__ import annotations

from datetime import UTC, datetime

from maxclaw.timeline.rows import MessageRow
from maxclaw.turns.history import whole_groups


def row(i: int, role: str, calls: tuple[str, ...] = (), result: str | None = None,
        ) -> MessageRow:
    return MessageRow(id=i, user_id="u", thread_id="t", role=role, body=None, content=None,
                      tool_calls=[{"id": c, "name": "f"} for c in calls], tool_call_id=result,
                      display=None, source_meta=None, sensitive=False, turn_id=None,
                      delivered_at=None, created_at=datetime.now(UTC), rev=0)


def ids(rows: list[MessageRow]) -> list[int]:
    return [r.id for r in rows]


def test_a_window_starting_inside_a_group_starts_after_it() -> None:
    # the cap cut between call c1 (row 1, outside) and its result (row 3): rows 2-3 go too
    window = [row(2, "user"), row(3, "tool", result="c1"), row(4, "user"),
              row(5, "assistant", ("c2",)), row(6, "tool", result="c2")]
    assert ids(whole_groups(window)) == [4, 5, 6]


def test_dropping_rows_can_orphan_a_later_result_and_that_goes_too() -> None:
    # row 3's result belongs to row 1 (outside); dropping up to row 3 leaves row 4's call
    # (row 2) outside as well, so the window starts after row 4
    window = [row(2, "assistant", ("c2",)), row(3, "tool", result="c1"),
              row(4, "tool", result="c2"), row(5, "user")]
    assert ids(whole_groups(window)) == [5]


def test_whole_groups_are_kept_as_they_are() -> None:
    window = [row(1, "assistant", ("a", "b")), row(2, "user"), row(3, "tool", result="a"),
              row(4, "tool", result="b")]
    assert whole_groups(window) == window


def test_a_group_larger_than_the_window_is_returned_split_rather_than_nothing() -> None:
    # the head is a result whose call is outside: an empty window would send the cursor back
    # to the same place forever, so the bounded window is returned as it is
    window = [row(7, "user"), row(8, "tool", result="old")]
    assert whole_groups(window) == window
    assert whole_groups([]) == []
