"""Main's reading tools: ``read_thread`` (the asking thread, bounded, as quoted data) and
``list_open_questions`` (every open or with-Main card of the user). Executed like
``answer_for_max`` (``server_tools``), in Main's thread only; a refusal is the tool row.

What Main reads is the stored rows: a secret answer is its masked placeholder
(``••••[card …]``), never the plaintext, which only the asking thread's own model is handed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from maxclaw.auth.service import Principal, parse_uuid
from maxclaw.cards.text import DATA_NOT_INSTRUCTIONS, SPEAKERS
from maxclaw.clock import Clock
from maxclaw.components import main_store
from maxclaw.errors import Forbidden, Invalid, MaxclawError, NotFound
from maxclaw.timefmt import rfc3339_or_none
from maxclaw.timeline.groups import whole_groups
from maxclaw.timeline.rows import MessageRow

READ_THREAD = "read_thread"
LIST_OPEN = "list_open_questions"
READ_ROWS = 50  # read_thread's defaults (settings: main_read_rows, main_read_bytes)
READ_BYTES = 64 * 1024
MAX_CALLS_SHOWN = 8  # of one assistant row's calls (the rest are counted)
OPEN_LIMIT = 100  # list_open_questions' cards (oldest first; the rest are counted as more)
READ_NOTE = (
    f"{DATA_NOT_INSTRUCTIONS} Speakers: Max (user), the asking agent (assistant), tool "
    "results, service events. Secret answers appear only as ••••[card …]. Older messages: "
    "call again with before_id.")


@dataclass(frozen=True)
class MainLimits:
    """read_thread's bounds: rows and bytes of one result."""

    rows: int = READ_ROWS
    bytes: int = READ_BYTES


def _clip(text: str, max_bytes: int) -> str:
    raw = text.encode("utf-8")
    if len(raw) <= max_bytes:
        return text
    return raw[:max(0, max_bytes - 40)].decode("utf-8", "ignore") + \
        f"… [cut: {len(raw)} bytes in all]"


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False).encode("utf-8"))


def _arguments(raw: object) -> str:
    return raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False)


def _message(row: MessageRow, field_bytes: int) -> dict[str, Any]:
    """One row as Main reads it: who spoke and what, clipped to ``field_bytes`` a field."""
    out: dict[str, Any] = {"id": row.id, "from": SPEAKERS.get(row.role, row.role),
                           "at": rfc3339_or_none(row.created_at)}
    if row.role == "tool":
        content = row.content
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        out["tool_call_id"] = row.tool_call_id
        out["text"] = _clip(text, field_bytes)
        return out
    out["text"] = _clip(row.body or "", field_bytes)
    calls = row.tool_calls or []
    if calls:
        out["calls"] = [{"id": c.get("id"), "name": c.get("name"),
                         "arguments": _clip(_arguments(c.get("arguments")), field_bytes)}
                        for c in calls[:MAX_CALLS_SHOWN]]
        if len(calls) > MAX_CALLS_SHOWN:
            out["more_calls"] = len(calls) - MAX_CALLS_SHOWN
    return out


def _bounded(rows: list[MessageRow], max_bytes: int) -> tuple[list[dict[str, Any]], bool]:
    """The newest rows whose projections fit in ``max_bytes`` together, oldest first, cut at
    a whole tool-call group; whether older rows of the window were left out."""
    # a field holds at most a sixteenth of the budget, so one row (at most MAX_CALLS_SHOWN
    # calls and its text) always fits and the newest row is never dropped
    field_bytes = max(64, max_bytes // 16)
    kept: list[MessageRow] = []
    total = 2  # the list's brackets
    for row in reversed(rows):
        size = _size(_message(row, field_bytes)) + 1
        if kept and total + size > max_bytes:
            break
        kept.append(row)
        total += size
    kept.reverse()
    grouped = whole_groups(kept)
    return [_message(r, field_bytes) for r in grouped], len(grouped) < len(rows)


def _optional_int(args: dict[str, Any], key: str, low: int, high: int) -> int | None:
    value = args.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise Invalid.at(["arguments", key], f"{key} must be an integer from {low} to {high}")
    return value


def _question_words(row: main_store.OpenQuestion) -> tuple[str | None, str | None]:
    """The card's title and this question's words, from the call that defined it."""
    call_id, _, question_id = row.id.rpartition(":")
    for call in row.tool_calls or []:
        if call.get("id") != call_id:
            continue
        args = call.get("arguments")
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                return None, None
        if not isinstance(args, dict):
            return None, None
        for q in args.get("questions") or []:
            if isinstance(q, dict) and q.get("id") == question_id:
                return args.get("title"), q.get("question")
        return args.get("title"), None
    return None, None


class MainContext:
    """read_thread and list_open_questions, inside the caller's transaction."""

    def __init__(self, clock: Clock, limits: MainLimits | None = None) -> None:
        self.clock = clock
        self.limits = limits or MainLimits()

    async def read_thread(self, conn: asyncpg.Connection, main: Principal,
                          args: dict[str, Any]) -> dict[str, Any]:
        """The asking thread's newest messages (before ``before_id``), bounded, as data."""
        thread_id = args.get("thread_id")
        if not isinstance(thread_id, str) or not thread_id:
            raise Invalid.at(["arguments", "thread_id"], "thread_id is required: the asking "
                                                         "thread's id, as the hand-off names it")
        limit = _optional_int(args, "limit", 1, self.limits.rows) or self.limits.rows
        before_id = _optional_int(args, "before_id", 1, 2**63 - 1)
        try:
            thread_id = parse_uuid(thread_id)
        except MaxclawError:
            raise _no_thread(thread_id) from None
        gate = await main_store.read_gate(conn, main.user_id, thread_id)
        if gate is None:
            raise _no_thread(thread_id)
        if not gate.asked:
            raise Forbidden(
                f"Thread {thread_id} has no question that was handed to you, so you may not "
                "read it. read_thread opens only the threads your hand-offs name; "
                "list_open_questions shows the cards waiting.")
        rows, older = await main_store.read_window(conn, main.user_id, thread_id, before_id,
                                                   limit, self.limits.bytes)
        messages, cut = _bounded(rows, self.limits.bytes)
        first = messages[0]["id"] if messages else None
        return {"thread_id": gate.id, "title": gate.title, "note": READ_NOTE,
                "messages": messages,
                "before_id": first if (older or cut) and first is not None else None}

    async def list_open_questions(self, conn: asyncpg.Connection, main: Principal,
                                  args: dict[str, Any]) -> dict[str, Any]:
        """Every open or with-Main card of the user, oldest first, with age and due time."""
        now = self.clock.now()
        rows = await main_store.open_questions(conn, main.user_id, OPEN_LIMIT + 1)
        return {"note": DATA_NOT_INSTRUCTIONS,
                "questions": [_open(r, now) for r in rows[:OPEN_LIMIT]],
                "more": len(rows) > OPEN_LIMIT}


def _open(row: main_store.OpenQuestion, now: datetime) -> dict[str, Any]:
    title, question = _question_words(row)
    return {"component_id": row.id, "status": row.status, "kind": row.kind,
            "stakes": row.stakes, "title": title, "question": question,
            "thread_id": row.thread_id, "thread_title": row.thread_title,
            "posted_at": rfc3339_or_none(row.posted_at),
            "age_minutes": int((now - row.posted_at).total_seconds() // 60),
            "due_at": rfc3339_or_none(row.due_at),
            "expires_at": rfc3339_or_none(row.expires_at)}


def _no_thread(thread_id: str) -> NotFound:
    return NotFound(f"No thread {thread_id} of Max's: check the id the hand-off names "
                    "(list_open_questions lists the threads with questions).")
