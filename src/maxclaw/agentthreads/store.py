"""SQL for agent threads outside a turn. Every query is scoped by ``user_id``."""

from __future__ import annotations

from datetime import datetime

import asyncpg

from maxclaw.agentthreads.rows import ActiveTurn
from maxclaw.components.rows import CardComponentRow
from maxclaw.components.store import COMPONENT_COLUMNS

# A thread's cards with what their projection needs (the call that defines each), oldest first.
THREAD_CARDS = f"""
SELECT {COMPONENT_COLUMNS}, m.tool_calls
  FROM message_components c
  JOIN messages m ON m.user_id = c.user_id AND m.id = c.message_id
 WHERE c.user_id = $1::uuid AND c.thread_id = $2::uuid
 ORDER BY c.posted_at, c.id
 LIMIT $3
"""
# The thread's queued or running turn (at most one: turns_one_active_per_thread), locked, so a
# claim (which takes queued turns FOR UPDATE SKIP LOCKED) cannot start it while we deliver.
LOCK_ACTIVE_TURN = """
SELECT id, status FROM turns
 WHERE user_id = $1::uuid AND thread_id = $2::uuid AND status IN ('queued', 'running')
   FOR UPDATE
"""
# queued → done: the input it was queued for has just been delivered outside a turn.
RETIRE_QUEUED_TURN = """
UPDATE turns SET status = 'done', finished_at = $3
 WHERE user_id = $1::uuid AND id = $2 AND status = 'queued'
RETURNING id
"""


async def thread_cards(conn: asyncpg.Connection, user_id: str, thread_id: str,
                       limit: int) -> list[CardComponentRow]:
    """The thread's cards (oldest first, at most ``limit``), each with its defining call."""
    return [CardComponentRow.from_record(r)
            for r in await conn.fetch(THREAD_CARDS, user_id, thread_id, limit)]


async def lock_active_turn(conn: asyncpg.Connection, user_id: str,
                           thread_id: str) -> ActiveTurn | None:
    row = await conn.fetchrow(LOCK_ACTIVE_TURN, user_id, thread_id)
    return ActiveTurn.from_record(row) if row is not None else None


async def retire_queued_turn(conn: asyncpg.Connection, user_id: str, turn_id: int,
                             now: datetime) -> bool:
    return await conn.fetchval(RETIRE_QUEUED_TURN, user_id, turn_id, now) is not None
