"""SQL of threads' and users' housekeeping. Every query carries ``user_id``."""

from __future__ import annotations

import asyncpg

from maxclaw.housekeeping.rows import DecisionRef, MeCounts, UserSummary
from maxclaw.timeline.rows import ThreadRow
from maxclaw.timeline.store import THREAD_COLUMNS, get_thread

__all__ = ["get_thread"]  # the thread as committed (timeline's read)

LOCK_THREAD = f"""
SELECT {THREAD_COLUMNS} FROM threads WHERE user_id = $1::uuid AND id = $2::uuid FOR UPDATE
"""
RENAME = f"""
UPDATE threads SET title = $3 WHERE user_id = $1::uuid AND id = $2::uuid
RETURNING {THREAD_COLUMNS}
"""
# archived_at is kept when already set (archiving twice is one archive)
SET_ARCHIVED = f"""
UPDATE threads SET archived_at = CASE WHEN $3 THEN coalesce(archived_at, now()) END
 WHERE user_id = $1::uuid AND id = $2::uuid
RETURNING {THREAD_COLUMNS}
"""
UNSETTLED_COMPONENTS = """
SELECT id FROM message_components
 WHERE user_id = $1::uuid AND thread_id = $2::uuid AND status = ANY($3::text[])
 ORDER BY id
"""
THREAD_DECISIONS = """
SELECT id, component_id, status FROM decisions
 WHERE user_id = $1::uuid AND thread_id = $2::uuid ORDER BY id
"""
# The withdraw pushes queued for a thread's decisions outlive the rows they withdraw: detached
# from the decision (which the delete removes, and its outbox rows with it), they carry only
# the notification's collapse id, never the thread.
DETACH_WITHDRAWS = """
UPDATE push_outbox SET decision_id = NULL
 WHERE user_id = $1::uuid AND decision_id = ANY($2::bigint[]) AND kind = 'withdraw'
   AND status = 'pending'
"""
# Everything of a thread, in one statement per table that does not follow the thread's foreign
# keys: the audit names components, not the thread; the push rows of its decisions (cascaded
# anyway, deleted here by name so the statement says it). The thread's own delete cascades to
# messages (and their sealed secrets), message_components, decisions (their action tokens),
# turns, presence and the agent tokens bound to it (and their WebSocket tickets).
DELETE_AUDIT = """
DELETE FROM component_audit
 WHERE user_id = $1::uuid AND component_id IN (
       SELECT id FROM message_components WHERE user_id = $1::uuid AND thread_id = $2::uuid)
"""
DELETE_PUSHES = """
DELETE FROM push_outbox WHERE user_id = $1::uuid AND decision_id = ANY($2::bigint[])
"""
# the agent tokens bound to the thread go with it (the foreign key's cascade): every replica is
# told, as a revoke tells them (auth/store.py), so none keeps one in its cache
DELETE_THREAD = """
WITH bound AS (
    SELECT id FROM api_tokens WHERE user_id = $1::uuid AND thread_id = $2::uuid
), gone AS (
    DELETE FROM threads WHERE user_id = $1::uuid AND id = $2::uuid RETURNING id
)
SELECT (SELECT count(*) FROM gone) AS deleted,
       (SELECT count(pg_notify('maxclaw_token_revoked', b.id::text)) FROM bound b
         WHERE EXISTS (SELECT 1 FROM gone)) AS told
"""
REFRESH_LIVE_ACTIVITIES = "SELECT maxclaw_refresh_live_activities(ARRAY[$1::uuid])"


async def lock_thread(conn: asyncpg.Connection, user_id: str,
                      thread_id: str) -> ThreadRow | None:
    row = await conn.fetchrow(LOCK_THREAD, user_id, thread_id)
    return ThreadRow.from_record(row) if row else None


async def rename(conn: asyncpg.Connection, user_id: str, thread_id: str,
                 title: str) -> ThreadRow:
    return ThreadRow.from_record(await conn.fetchrow(RENAME, user_id, thread_id, title))


async def set_archived(conn: asyncpg.Connection, user_id: str, thread_id: str,
                       archived: bool) -> ThreadRow:
    return ThreadRow.from_record(await conn.fetchrow(SET_ARCHIVED, user_id, thread_id, archived))


async def unsettled_components(conn: asyncpg.Connection, user_id: str, thread_id: str,
                               statuses: list[str]) -> list[str]:
    return [r["id"] for r in await conn.fetch(UNSETTLED_COMPONENTS, user_id, thread_id,
                                              statuses)]


async def thread_decisions(conn: asyncpg.Connection, user_id: str,
                           thread_id: str) -> list[DecisionRef]:
    return [DecisionRef.from_record(r)
            for r in await conn.fetch(THREAD_DECISIONS, user_id, thread_id)]


async def detach_withdraws(conn: asyncpg.Connection, user_id: str,
                           decision_ids: list[int]) -> None:
    await conn.execute(DETACH_WITHDRAWS, user_id, decision_ids)


async def delete_thread(conn: asyncpg.Connection, user_id: str, thread_id: str,
                        decision_ids: list[int]) -> bool:
    """Every row of the thread; False if it was gone already."""
    await conn.execute(DELETE_AUDIT, user_id, thread_id)
    await conn.execute(DELETE_PUSHES, user_id, decision_ids)
    row = await conn.fetchrow(DELETE_THREAD, user_id, thread_id)
    return bool(row and row["deleted"])


async def refresh_live_activities(conn: asyncpg.Connection, user_id: str) -> None:
    await conn.fetchval(REFRESH_LIVE_ACTIVITIES, user_id)


USERS = """
SELECT u.id::text AS id, u.name, u.created_at,
       (SELECT count(*) FROM threads t WHERE t.user_id = u.id) AS threads,
       (SELECT count(*) FROM api_tokens k WHERE k.user_id = u.id) AS tokens,
       (SELECT count(*) FROM push_devices d WHERE d.user_id = u.id) AS devices,
       (SELECT count(*) FROM turns r WHERE r.user_id = u.id AND r.status = 'running')
           AS running_turns
  FROM users u ORDER BY u.name
"""
LOCK_USER = "SELECT id::text FROM users WHERE name = $1 FOR UPDATE"
RUNNING_TURNS = """
SELECT count(*) FROM turns WHERE user_id = $1::uuid AND status = 'running'
"""
# every table's user_id references users ON DELETE CASCADE: one delete takes all of it; each
# of the user's tokens is announced as revoked (auth/store.py), so no replica keeps one cached
DELETE_USER = """
WITH tokens AS (
    SELECT id FROM api_tokens WHERE user_id = $1::uuid
), gone AS (
    DELETE FROM users WHERE id = $1::uuid RETURNING id
)
SELECT (SELECT count(*) FROM gone) AS deleted,
       (SELECT count(pg_notify('maxclaw_token_revoked', t.id::text)) FROM tokens t
         WHERE EXISTS (SELECT 1 FROM gone)) AS told
"""


async def list_users(conn: asyncpg.Connection) -> list[UserSummary]:
    return [UserSummary.from_record(r) for r in await conn.fetch(USERS)]


async def lock_user(conn: asyncpg.Connection, name: str) -> str | None:
    value = await conn.fetchval(LOCK_USER, name)
    return None if value is None else str(value)


async def running_turns(conn: asyncpg.Connection, user_id: str) -> int:
    return int(await conn.fetchval(RUNNING_TURNS, user_id))


async def delete_user(conn: asyncpg.Connection, user_id: str) -> None:
    await conn.fetchrow(DELETE_USER, user_id)


ME = """
SELECT u.created_at,
       (SELECT count(*) FROM threads t WHERE t.user_id = u.id AND t.archived_at IS NULL)
           AS threads,
       (SELECT count(*) FROM threads t WHERE t.user_id = u.id AND t.archived_at IS NOT NULL)
           AS archived_threads,
       (SELECT count(*) FROM push_devices d WHERE d.user_id = u.id) AS devices,
       (SELECT count(*) FROM api_tokens k WHERE k.user_id = u.id) AS tokens
  FROM users u WHERE u.id = $1::uuid
"""


async def me(conn: asyncpg.Connection, user_id: str) -> MeCounts | None:
    row = await conn.fetchrow(ME, user_id)
    return MeCounts.from_record(row) if row else None
