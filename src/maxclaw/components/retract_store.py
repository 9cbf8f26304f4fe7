"""SQL for taking an answer back (the ``retract`` row of the transitions table).

Lock order of a retract, the claim's and the inbox's order: the thread's queued turn (a claim
locks it first, ``turns.store.PICK_NEXT``), the answer message (a claim or an inbox stamps
``delivered_at`` on it before stamping the component's ``seen_at``), then the component (the
CAS), its tool row, the carrier. Whoever takes the message row first decides: a retract that
finds it delivered is ``409 seen``; a claim that finds it taken back hands the model nothing
of it.
"""

from __future__ import annotations

from datetime import datetime

import asyncpg

from maxclaw.components.rows import AnswerMessage

# the thread's wake-up not started yet, locked before the answer message (a claim takes it
# with SKIP LOCKED, so it passes this thread over until the retract is done)
LOCK_QUEUED_TURN = """
SELECT id FROM turns
 WHERE user_id = $1::uuid AND thread_id = $2::uuid AND status = 'queued'
   FOR UPDATE
"""
# the answer's message: the newest row of Max's answer to this component, not taken back yet.
# FOR UPDATE returns the row as its last writer left it (a claim that delivered it meanwhile)
ANSWER_MESSAGE = """
SELECT id, delivered_at FROM messages
 WHERE user_id = $1::uuid AND thread_id = $2::uuid AND id > $3 AND role = 'user'
   AND source_meta -> 'componentAnswer' ->> 'componentId' = $4
   AND NOT source_meta ? 'retracted'
 ORDER BY id DESC LIMIT 1
   FOR UPDATE
"""
# ``WITHDRAW_ANSWER``, set-wise: the undelivered answer messages of these components marked
# taken back and delivered (out of the inbox; the model window leaves them out), their sealed
# boxes destroyed, and each thread's queued turn closed when no other input waits for it
# (``done`` never claimed: ``claimed_at`` stays null).
#   $1 user ids, $2 thread ids, $3 component ids, $4 now
WITHDRAW_ANSWERS = """
WITH x AS (
    SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::text[]) AS x(user_id, thread_id, cid)
), taken AS (
    UPDATE messages m
       SET delivered_at = $4,
           source_meta = m.source_meta || jsonb_build_object('retracted', jsonb_build_object(
               'componentId', x.cid, 'at', to_char($4 AT TIME ZONE 'UTC',
                                                   'YYYY-MM-DD"T"HH24:MI:SS"Z"')))
      FROM x
     WHERE m.user_id = x.user_id AND m.thread_id = x.thread_id AND m.role = 'user'
       AND m.delivered_at IS NULL
       AND m.source_meta -> 'componentAnswer' ->> 'componentId' = x.cid
       AND NOT m.source_meta ? 'retracted'
    RETURNING m.id, m.user_id
), sealed AS (
    DELETE FROM message_secrets s USING taken
     WHERE s.user_id = taken.user_id AND s.message_id = taken.id
)
SELECT count(*) FROM taken
"""
CANCEL_IDLE_WAKE = """
UPDATE turns t SET status = 'done', finished_at = $3
  FROM unnest($1::uuid[], $2::uuid[]) AS x(user_id, thread_id)
 WHERE t.user_id = x.user_id AND t.thread_id = x.thread_id AND t.status = 'queued'
   AND NOT EXISTS (SELECT 1 FROM messages m
                    WHERE m.user_id = x.user_id AND m.thread_id = x.thread_id
                      AND m.delivered_at IS NULL AND m.role IN ('user', 'event'))
RETURNING t.id
"""
# ``REDUE``: the reopened card's due moment, and the mirror's due_at (as timefmt.rfc3339 writes
# it) and main_may_take
#   $1 user id, $2 component id, $3 due_at (NULL: never to Main by time), $4 it as the wire
#   writes it, $5 main_may_take
REDUE = """
WITH c AS (
    UPDATE message_components SET due_at = $3
     WHERE user_id = $1::uuid AND id = $2 AND status = 'open'
    RETURNING tool_message_id
)
UPDATE messages m
   SET display = jsonb_set(jsonb_set(m.display, ARRAY['states', $2, 'due_at'],
                                     coalesce(to_jsonb($4::text), 'null'::jsonb)),
                           ARRAY['states', $2, 'main_may_take'], to_jsonb($5::bool))
 WHERE m.user_id = $1::uuid AND m.id = (SELECT c.tool_message_id FROM c)
   AND jsonb_typeof(m.display -> 'states' -> $2) = 'object'
"""


async def lock_queued_turn(conn: asyncpg.Connection, user_id: str, thread_id: str) -> None:
    """Lock the thread's queued turn, if any (before the answer message)."""
    await conn.execute(LOCK_QUEUED_TURN, user_id, thread_id)


async def answer_message(conn: asyncpg.Connection, user_id: str, thread_id: str,
                         after_id: int, component_id: str) -> AnswerMessage | None:
    """The message holding Max's answer to ``component_id``, locked; None if there is none."""
    row = await conn.fetchrow(ANSWER_MESSAGE, user_id, thread_id, after_id, component_id)
    return AnswerMessage.from_record(row) if row is not None else None


async def withdraw_answers(conn: asyncpg.Connection, keys: list[tuple[str, str, str]],
                           now: datetime) -> int:
    """Take back the undelivered answer messages of ``(user, thread, component)``; how many."""
    return int(await conn.fetchval(WITHDRAW_ANSWERS, [k[0] for k in keys],
                                   [k[1] for k in keys], [k[2] for k in keys], now))


async def cancel_idle_wake(conn: asyncpg.Connection, threads: list[tuple[str, str]],
                           now: datetime) -> int:
    """Close the queued turns of ``(user, thread)`` that no input waits for; how many."""
    rows = await conn.fetch(CANCEL_IDLE_WAKE, [u for u, _ in threads], [t for _, t in threads],
                            now)
    return len(rows)


async def redue(conn: asyncpg.Connection, user_id: str, component_id: str,
                due_at: datetime | None, due_text: str | None, main_may_take: bool) -> None:
    """Set a reopened card's due moment and mirror it with ``main_may_take``."""
    await conn.execute(REDUE, user_id, component_id, due_at, due_text, main_may_take)
