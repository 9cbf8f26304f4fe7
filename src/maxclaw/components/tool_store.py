"""SQL for tool execution: find the call on its assistant row, find a stored result."""

from __future__ import annotations

from typing import Any

import asyncpg

FIND_CALL = """
SELECT id, turn_id, tool_calls FROM messages
 WHERE user_id = $1::uuid AND thread_id = $2::uuid AND role = 'assistant'
   AND tool_calls @> $3::jsonb
 ORDER BY id DESC LIMIT 1
"""
TOOL_RESULT = """
SELECT id, content, source_meta FROM messages
 WHERE user_id = $1::uuid AND thread_id = $2::uuid AND role = 'tool' AND tool_call_id = $3
"""


async def find_call(conn: asyncpg.Connection, user_id: str, thread_id: str,
                    tool_call_id: str) -> dict[str, Any] | None:
    """The tool call (``{"id","name","arguments"}``) plus its row's ``message_id``/``turn_id``."""
    probe = [{"id": tool_call_id}]
    row = await conn.fetchrow(FIND_CALL, user_id, thread_id, probe)
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


