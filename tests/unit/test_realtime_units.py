"""Realtime pieces that need no database: cursors, the send queue, frames, log redaction."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import UTC, datetime
from typing import Any, cast

import pytest

from maxclaw.db.database import Database
from maxclaw.realtime import frames, logfilter
from maxclaw.realtime.cursor import (
    ORIGIN,
    CursorError,
    Position,
    decode,
    encode,
    transaction_end,
)
from maxclaw.realtime.hub import RealtimeHub, Subscription
from maxclaw.realtime.sendqueue import SendQueue
from maxclaw.realtime.store import Change
from maxclaw.timeline.rows import MessageRow


@pytest.mark.parametrize("position", [ORIGIN, Position(1, 0), Position(734, 40201),
                                      Position(2**63 - 1, 2**63 - 1)])
def test_cursor_round_trips(position: Position) -> None:
    cursor = encode(position)
    assert decode(cursor) == position
    assert "=" not in cursor
    assert "." not in cursor


@pytest.mark.parametrize("bad", [
    "", "x", "not a cursor", "MS4xLjI=",  # padding is not our spelling
    encode(Position(1, 2))[:-1], encode(Position(1, 2)) + "A",
    "Mi4xLjI",  # "2.1.2": an unknown version
    "MS4wMS4y",  # "1.01.2": a leading zero is not canonical
    "MS4tMS4y",  # "1.-1.2"
    "MS45OTk5OTk5OTk5OTk5OTk5OTk5OS4x",  # xid beyond 2**63
    "a" * 65,
])
def test_undecodable_cursors_are_refused(bad: str) -> None:
    with pytest.raises(CursorError):
        decode(bad)


def test_positions_order_like_the_catch_up_query() -> None:
    assert Position(5, 900) < Position(6, 1) < Position(6, 2)
    assert max(Position(6, 0), Position(5, 10**9)) == Position(6, 0)


async def test_push_always_queues_and_over_limit_says_when_the_reader_lags() -> None:
    queue = SendQueue(max_chars=10)
    queue.push("x" * 25)  # one batch may take the queue over the bound
    assert queue.over_limit
    queue.push("y")
    assert (len(queue), queue.chars) == (2, 26)
    assert await queue.get() == "x" * 25
    assert not queue.over_limit
    assert await queue.get() == "y"


async def test_put_takes_any_frame_into_an_empty_queue() -> None:
    queue = SendQueue(max_chars=4)
    await asyncio.wait_for(queue.put("a much longer frame"), 1)
    assert len(queue) == 1


async def test_put_waits_for_room_and_keeps_order() -> None:
    queue = SendQueue(max_chars=4)
    await queue.put("abcd")
    waiting = asyncio.create_task(queue.put("efgh"))
    await asyncio.sleep(0)
    assert not waiting.done()
    assert len(queue) == 1
    assert await queue.get() == "abcd"
    await waiting
    assert await queue.get() == "efgh"


async def test_a_closed_queue_drops_frames_and_releases_waiters() -> None:
    queue = SendQueue(max_chars=4)
    await queue.put("abcd")
    waiting = asyncio.create_task(queue.put("efgh"))
    await asyncio.sleep(0)
    queue.close()
    await asyncio.wait_for(waiting, 1)
    assert len(queue) == 0
    queue.push("more")
    assert len(queue) == 0


def _change(table: str, thread_id: str | None, row: dict[str, Any]) -> Change:
    return Change(table, Position(10, int(row["rev"])), "u1", thread_id, row)


def test_record_frame_uses_the_client_projection_and_rfc3339() -> None:
    at = datetime(2026, 11, 30, 4, 5, 6, 789000, tzinfo=UTC)
    row = MessageRow(id=7, user_id="u1", thread_id="t1", role="user", body="plaintext",
                     content=None, tool_calls=None, tool_call_id=None, display=None,
                     source_meta=None, sensitive=True, turn_id=None, delivered_at=None,
                     created_at=at, rev=42)
    frame = json.loads(frames.record_frame(Change("messages", Position(10, 42), "u1", "t1", row)))
    assert frame["type"] == "record.upsert"
    assert frame["table"] == "messages"
    assert frame["rev"] == 42
    assert decode(frame["cursor"]) == Position(10, 42)
    assert frame["record"]["body"] is None  # a sensitive row never shows its body
    assert "user_id" not in frame["record"]
    assert "sensitive" not in frame["record"]
    assert frame["record"]["created_at"] == "2026-11-30T04:05:06.789000Z"  # as REST spells it
    assert datetime.fromisoformat(frame["record"]["created_at"]) == at


def test_subscription_scope_keeps_threads_their_messages_and_decisions() -> None:
    sub = Subscription("u1", frozenset({"t1"}), ORIGIN, SendQueue(100), lambda: None)
    assert sub.wants(_change("threads", "t1", {"rev": 1}))
    assert sub.wants(_change("messages", "t1", {"rev": 2}))
    assert sub.wants(_change("decisions", "t1", {"rev": 3}))
    assert not sub.wants(_change("messages", "t2", {"rev": 4}))
    assert not sub.wants(_change("decisions", None, {"rev": 5}))
    everything = Subscription("u1", None, ORIGIN, SendQueue(100), lambda: None)
    assert everything.wants(_change("decisions", None, {"rev": 5}))


def test_tokens_in_query_strings_are_masked_in_logs() -> None:
    record = logging.LogRecord("uvicorn.error", logging.INFO, __file__, 1,
                               '%s - "WebSocket %s" [accepted]',
                               ("127.0.0.1:5", "/v1/ws?token=mc_u_SECRET&x=1"), None)
    assert logfilter.RedactTokens().filter(record)
    assert record.getMessage() == '127.0.0.1:5 - "WebSocket /v1/ws?token=***&x=1" [accepted]'
    assert logfilter.redact("/v1/ws?a=1&token=abc") == "/v1/ws?a=1&token=***"
    assert logfilter.redact("/v1/ws?mytoken=abc") == "/v1/ws?mytoken=abc"


@pytest.mark.parametrize("path", ["/v1/ws?%74oken=abc", "/v1/ws?a=1&%74%6F%6B%65%6E=abc",
                                  "/v1/ws?TOKEN=abc", "/v1/ws?ticket=abc", "/v1/ws?%2574oken=abc"])
def test_redaction_judges_the_name_after_percent_decoding(path: str) -> None:
    # issue 14, finding 8: ``?%74oken=`` is ``token`` to the server and escaped the mask
    assert "abc" not in logfilter.redact(path)
    assert logfilter.redact(path).endswith("=***")


@pytest.mark.parametrize("hint", [
    {"u": "max", "x": "734"},  # 0029: the user and the transaction
    {"t": "threads", "id": "a", "rev": 40201, "u": "max", "x": "734"},  # a row's, before 0029
])
def test_a_hint_makes_its_user_pending_past_its_transaction(hint: dict[str, Any]) -> None:
    """A hint of either shape makes a connected user pending until his sockets are covered
    past the hint's whole transaction: by a read whose horizon passed it, not by one that
    stopped at one of its rows."""
    pending = transaction_end(734)
    hub = RealtimeHub(cast(Database, None), poll_s=30)
    sub = Subscription("max", None, Position(700, 5), SendQueue(max_chars=1000), lambda: None)
    hub._subs["max"] = {sub}
    hub._on_hint(json.dumps(hint))
    assert hub._pending == {"max": pending}
    sub.covered = Position(734, 40201)  # a page cut at a row of the transaction
    assert hub._covered("max", transaction_end(734)) is False
    sub.covered = Position(735, 0)  # a horizon past it
    assert hub._covered("max", pending) is True
    hub._on_hint(json.dumps({"u": "eve", "x": "9"}))  # nobody of hers here: nothing to read
    assert "eve" not in hub._pending
