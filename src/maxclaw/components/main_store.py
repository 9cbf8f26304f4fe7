"""SQL of Main's context: the hand-off's excerpt (set-wise), ``read_thread``'s gate and window,
``list_open_questions``. Every query is scoped by ``user_id``; rows are read as stored, so a
secret is its masked placeholder here (only ``SecretService.model_rows`` opens a box)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import asyncpg

from maxclaw.timeline.rows import MessageRow
from maxclaw.timeline.store import MESSAGE_COLUMNS

# The newest rows up to each card's question (its assistant row included: the agent's words
# beside the call), for a batch of hand-offs in one statement. Each key is (user, thread, the
# card's assistant row id). The service's own tool results ("Posted. The turn will not
# wait…") are left out: they say nothing of why. Every row's text is clipped here, so a batch
# never reads a 1 MiB tool result to quote 600 characters of it. messages_thread_id
# (thread_id, id) serves each lateral read, newest first.
EXCERPTS = """
SELECT k.i, m.role,
       CASE m.role
         WHEN 'tool' THEN left(CASE jsonb_typeof(m.content) WHEN 'string'
                                    THEN m.content #>> '{}' ELSE m.content::text END, $5)
         WHEN 'assistant' THEN left(concat_ws(' ', m.body, (
                SELECT '[calls ' || string_agg(c->>'name', ', ') || ']'
                  FROM jsonb_array_elements(coalesce(m.tool_calls, '[]'::jsonb)) c)), $5)
         ELSE left(m.body, $5) END AS text
  FROM unnest($1::uuid[], $2::uuid[], $3::bigint[]) WITH ORDINALITY AS k(user_id, thread_id,
                                                                          through, i)
 CROSS JOIN LATERAL (
       SELECT x.id, x.role, x.body, x.content, x.tool_calls FROM messages x
        WHERE x.user_id = k.user_id AND x.thread_id = k.thread_id AND x.id <= k.through
          AND NOT (x.role = 'tool' AND coalesce(x.source_meta ? 'tool', false))
        ORDER BY x.id DESC LIMIT $4) m
 ORDER BY k.i, m.id
"""

# read_thread's gate: the thread (when it is the user's) and whether Main may read it — a card
# of it is with Main now, or one ever was (the audit's move to with-main: the hand-off message
# that named the thread was written by that move). message_components_thread finds the
# thread's cards, component_audit_component each card's moves.
READ_GATE = """
SELECT t.id::text, t.kind, t.title,
       EXISTS (SELECT 1 FROM message_components c
                WHERE c.thread_id = t.id AND c.user_id = $1::uuid AND c.status = 'with-main')
       OR EXISTS (SELECT 1 FROM message_components c
                   JOIN component_audit a ON a.user_id = c.user_id AND a.component_id = c.id
                  WHERE c.thread_id = t.id AND c.user_id = $1::uuid
                    AND a.to_status = 'with-main') AS asked
  FROM threads t WHERE t.user_id = $1::uuid AND t.id = $2::uuid
"""

# The newest rows before $3 (null: the head), at most $4 rows, kept while the newer ones hold
# fewer than $5 bytes (messages.size: the first row always comes, so one huge row is read once
# and clipped by the caller); then whether anything older is left.
READ_WINDOW = f"""
SELECT {MESSAGE_COLUMNS} FROM (
    SELECT *, sum(size) OVER (ORDER BY id DESC) - size AS newer FROM (
        SELECT * FROM messages
         WHERE user_id = $1::uuid AND thread_id = $2::uuid
           AND id < coalesce($3::bigint, 9223372036854775807)
           -- an answer Max took back: no model reads it, Main neither
           AND NOT coalesce(source_meta ? 'retracted', false)
         ORDER BY id DESC LIMIT $4) sized) window_rows
 WHERE newer < $5
 ORDER BY id
"""
HAS_OLDER = """
SELECT EXISTS (SELECT 1 FROM messages WHERE user_id = $1::uuid AND thread_id = $2::uuid
                                        AND id < $3)
"""

# list_open_questions: the user's threads with unsettled cards (threads.open_cards, kept by a
# trigger), then their open and with-Main cards by message_components_thread, oldest first, with
# the defining call (the question's words) and the thread's title; at most $2. Each thread's
# cards are read by the thread (the LATERAL, kept apart by OFFSET 0): the generic plan, which
# knows an average user only, otherwise read every card of the user by his key prefix on the
# partitioned schema (tests/integration/test_main_context_plans.py).
OPEN_QUESTIONS = """
SELECT c.id, c.thread_id::text, t.title AS thread_title, c.kind, c.stakes, c.status,
       c.posted_at, c.due_at, c.expires_at, m.tool_calls
  FROM threads t
 CROSS JOIN LATERAL (
       SELECT c.id, c.user_id, c.thread_id, c.message_id, c.kind, c.stakes, c.status,
              c.posted_at, c.due_at, c.expires_at
         FROM message_components c
        WHERE c.thread_id = t.id AND c.user_id = t.user_id
          AND c.status IN ('open', 'with-main')
       OFFSET 0) c
  JOIN messages m ON m.user_id = c.user_id AND m.id = c.message_id
 WHERE t.user_id = $1::uuid AND t.open_cards > 0
 ORDER BY c.posted_at, c.id
 LIMIT $2
"""


@dataclass(frozen=True, slots=True)
class ThreadGate:
    """``READ_GATE``'s row."""

    id: str
    kind: str
    title: str
    asked: bool


@dataclass(frozen=True, slots=True)
class OpenQuestion:
    """``OPEN_QUESTIONS``' row."""

    id: str
    thread_id: str
    thread_title: str
    kind: str
    stakes: str
    status: str
    posted_at: datetime
    due_at: datetime | None
    expires_at: datetime | None
    tool_calls: list[dict[str, object]] | None


async def excerpts(conn: asyncpg.Connection, keys: list[tuple[str, str, int]], rows: int,
                   row_chars: int) -> list[list[tuple[str, str]]]:
    """For each ``(user_id, thread_id, the card's assistant row id)``, its thread's newest
    ``rows`` rows through that row as ``(role, text)``, oldest first; one statement."""
    out: list[list[tuple[str, str]]] = [[] for _ in keys]
    if not keys:
        return out
    found = await conn.fetch(EXCERPTS, [k[0] for k in keys], [k[1] for k in keys],
                             [k[2] for k in keys], rows, row_chars)
    for r in found:
        if r["text"]:
            out[int(r["i"]) - 1].append((str(r["role"]), str(r["text"])))
    return out


async def read_gate(conn: asyncpg.Connection, user_id: str, thread_id: str) -> ThreadGate | None:
    row = await conn.fetchrow(READ_GATE, user_id, thread_id)
    return None if row is None else ThreadGate(row["id"], row["kind"], row["title"],
                                               bool(row["asked"]))


async def read_window(conn: asyncpg.Connection, user_id: str, thread_id: str,
                      before_id: int | None, max_rows: int,
                      max_bytes: int) -> tuple[list[MessageRow], bool]:
    """The window's rows (id order) and whether older rows are left before its first."""
    rows = [MessageRow.from_record(r) for r in await conn.fetch(
        READ_WINDOW, user_id, thread_id, before_id, max_rows, max_bytes)]
    if not rows:
        return [], False
    return rows, bool(await conn.fetchval(HAS_OLDER, user_id, thread_id, rows[0].id))


async def open_questions(conn: asyncpg.Connection, user_id: str,
                         limit: int) -> list[OpenQuestion]:
    return [OpenQuestion(**dict(r)) for r in await conn.fetch(OPEN_QUESTIONS, user_id, limit)]
