"""SQL for tool execution: the thread, the call on its assistant row and a stored result."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import asyncpg

from maxclaw.timeline.store import THREAD_COLUMNS

TOOL_RESULT = """
SELECT id, content, source_meta FROM messages
 WHERE user_id = $1::uuid AND thread_id = $2::uuid AND role = 'tool' AND tool_call_id = $3
"""

# What execute needs before it writes, in one read: the thread, a stored result for the call
# (a retry replays it) and the assistant row carrying the call. Was three statements over two
# pool checkouts.
CALL_CONTEXT = f"""
SELECT {THREAD_COLUMNS},
       (SELECT to_jsonb(r) FROM (SELECT m.id, m.content, m.source_meta FROM messages m
                                  WHERE m.user_id = $1::uuid AND m.thread_id = $2::uuid
                                    AND m.role = 'tool' AND m.tool_call_id = $3) r) AS done,
       (SELECT to_jsonb(r) FROM (SELECT m.id, m.turn_id, m.tool_calls FROM messages m
                                  WHERE m.user_id = $1::uuid AND m.thread_id = $2::uuid
                                    AND m.role = 'assistant' AND m.tool_calls @> $4::jsonb
                                  ORDER BY m.id DESC LIMIT 1) r) AS call_row
  FROM threads WHERE user_id = $1::uuid AND id = $2::uuid
"""


# What a post with "execute": true needs before it writes, in one read: the thread, the results
# already stored for its calls (a retried post replays them) and whether Max is watching the
# thread (a card's due time and carrier depend on it).
POST_CONTEXT = f"""
SELECT {THREAD_COLUMNS},
       (SELECT coalesce(jsonb_agg(m.tool_call_id), '[]'::jsonb) FROM messages m
         WHERE m.user_id = $1::uuid AND m.thread_id = $2::uuid AND m.role = 'tool'
           AND m.tool_call_id = ANY($3::text[])) AS done,
       EXISTS (SELECT 1 FROM presence p
                WHERE p.user_id = $1::uuid AND p.thread_id = $2::uuid AND p.expires_at > $4)
         AS watching
  FROM threads WHERE user_id = $1::uuid AND id = $2::uuid
"""


async def post_context(conn: asyncpg.Connection, user_id: str, thread_id: str,
                       tool_call_ids: list[str], now: datetime,
                       ) -> tuple[dict[str, Any], list[str], bool] | None:
    """``(thread, call ids that already have a result, watching)``; None when the thread is
    not the user's."""
    row = await conn.fetchrow(POST_CONTEXT, user_id, thread_id, tool_call_ids, now)
    if row is None:
        return None
    thread = dict(row)
    done, watching = thread.pop("done"), thread.pop("watching")
    return thread, list(done), bool(watching)


async def call_context(conn: asyncpg.Connection, user_id: str, thread_id: str,
                       tool_call_id: str) -> tuple[dict[str, Any], dict[str, Any] | None,
                                                   dict[str, Any] | None] | None:
    """``(thread, stored result, call)`` for a tool call; None when the thread is not the
    user's. The result is as ``tool_result`` returns it; the call is
    ``{"id", "name", "arguments"}`` plus its row's ``message_id`` and ``turn_id``."""
    row = await conn.fetchrow(CALL_CONTEXT, user_id, thread_id, tool_call_id,
                              [{"id": tool_call_id}])
    if row is None:
        return None
    thread = dict(row)
    done, call_row = thread.pop("done"), thread.pop("call_row")
    return thread, done, _call_of(call_row, tool_call_id)


def _call_of(row: Any, tool_call_id: str) -> dict[str, Any] | None:
    if row is None:
        return None
    for call in row["tool_calls"]:
        if call.get("id") == tool_call_id:
            return {**call, "message_id": row["id"], "turn_id": row["turn_id"]}
    return None


async def tool_result(conn: asyncpg.Connection, user_id: str, thread_id: str,
                      tool_call_id: str) -> dict[str, Any] | None:
    """The tool row already written for this call, if any."""
    row = await conn.fetchrow(TOOL_RESULT, user_id, thread_id, tool_call_id)
    return dict(row) if row else None


