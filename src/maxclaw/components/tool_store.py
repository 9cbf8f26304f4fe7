"""SQL for tool execution: the thread, the call on its assistant row and a stored result."""

from __future__ import annotations

from datetime import datetime

import asyncpg

from maxclaw.components.rows import PostedCall, StoredResult
from maxclaw.prefs import store as prefs_store
from maxclaw.prefs.rows import PrefsRow
from maxclaw.secrets import store as secrets_store
from maxclaw.secrets.mask import MAX_SECRETS
from maxclaw.secrets.rows import SecretRow
from maxclaw.timeline.rows import ThreadRow
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
# already stored for its calls (a retried post replays them), whether Max is watching the
# thread (a card's due time and carrier depend on it) and the thread's live secret answers (the
# echo check's rows: was a statement of its own). ``live_secrets`` is
# ``secrets.store.LIVE_ANSWERS`` as one column (an array of rows in its COLUMNS' order, read by
# ``secrets.store.live_rows``), the newest ``$5`` of them.
POST_CONTEXT = f"""
SELECT {THREAD_COLUMNS},
       (SELECT coalesce(jsonb_agg(m.tool_call_id), '[]'::jsonb) FROM messages m
         WHERE m.user_id = $1::uuid AND m.thread_id = $2::uuid AND m.role = 'tool'
           AND m.tool_call_id = ANY($3::text[])) AS done,
       EXISTS (SELECT 1 FROM presence p
                WHERE p.user_id = $1::uuid AND p.thread_id = $2::uuid AND p.expires_at > $4)
         AS watching,
       ARRAY(SELECT ROW(s.message_id, s.user_id::text, s.thread_id::text, s.kind,
                        s.component_id, s.key_id, s.box, s.state, s.expires_at)
               FROM message_secrets s
              WHERE s.user_id = $1::uuid AND s.thread_id = $2::uuid AND s.kind = 'answer'
                AND s.state = 'sealed'
              ORDER BY s.message_id DESC LIMIT $5) AS live_secrets,
       (SELECT to_jsonb(u) FROM user_settings u WHERE u.user_id = $1::uuid) AS prefs
  FROM threads WHERE user_id = $1::uuid AND id = $2::uuid
"""
_THREAD_FIELDS = ThreadRow.__dataclass_fields__.keys()


def _thread_of(row: asyncpg.Record) -> ThreadRow:
    return ThreadRow(**{k: row[k] for k in _THREAD_FIELDS})


async def post_context(conn: asyncpg.Connection, user_id: str, thread_id: str,
                       tool_call_ids: list[str], now: datetime,
                       ) -> tuple[ThreadRow, list[str], bool, list[SecretRow], PrefsRow] | None:
    """``(thread, call ids that already have a result, watching, live secret rows, his
    settings)``; None when the thread is not the user's."""
    row = await conn.fetchrow(POST_CONTEXT, user_id, thread_id, tool_call_ids, now,
                              MAX_SECRETS)
    if row is None:
        return None
    live = secrets_store.live_rows(row["live_secrets"])
    return (_thread_of(row), [str(i) for i in row["done"]], bool(row["watching"]), live,
            prefs_store.of_json(user_id, row["prefs"]))


async def call_context(conn: asyncpg.Connection, user_id: str, thread_id: str,
                       tool_call_id: str,
                       ) -> tuple[ThreadRow, StoredResult | None, PostedCall | None] | None:
    """``(thread, stored result, call)`` for a tool call; None when the thread is not the
    user's. The result is as ``tool_result`` returns it; the call is the one on the newest
    assistant row that carries it."""
    row = await conn.fetchrow(CALL_CONTEXT, user_id, thread_id, tool_call_id,
                              [{"id": tool_call_id}])
    if row is None:
        return None
    done = row["done"]
    stored = None if done is None else StoredResult(
        id=int(done["id"]), content=done["content"], source_meta=done["source_meta"])
    return _thread_of(row), stored, _call_of(row["call_row"], tool_call_id)


def _call_of(row: dict[str, object] | None, tool_call_id: str) -> PostedCall | None:
    """The call ``tool_call_id`` on a ``call_row`` (``{"id", "turn_id", "tool_calls"}``)."""
    if row is None:
        return None
    calls = row["tool_calls"]
    assert isinstance(calls, list)  # the row was found by its tool_calls containing the call
    for call in calls:
        if call.get("id") == tool_call_id:
            turn_id = row["turn_id"]
            return PostedCall(call=call, message_id=int(str(row["id"])),
                              turn_id=None if turn_id is None else int(str(turn_id)))
    return None


async def tool_result(conn: asyncpg.Connection, user_id: str, thread_id: str,
                      tool_call_id: str) -> StoredResult | None:
    """The tool row already written for this call, if any."""
    row = await conn.fetchrow(TOOL_RESULT, user_id, thread_id, tool_call_id)
    return StoredResult.from_record(row) if row else None
