"""SQL for ``message_secrets``: one sealed box per sensitive message (SQL only, no crypto).

``state`` is ``sealed`` (``key_id`` and ``box`` set) or ``expired`` (both null: the plaintext
was destroyed by the retention sweep or a purge). Reads from a request carry ``user_id``; the
sweep and rotation are operator passes over every user, like the lease lapse.
"""

from __future__ import annotations

from datetime import datetime

import asyncpg

from maxclaw.secrets.rows import LegacyPlaintextRow, SecretRow

COLUMNS = ("message_id, user_id::text, thread_id::text, kind, component_id, key_id, box, state,"
           " expires_at")

INSERT = """
INSERT INTO message_secrets (message_id, user_id, thread_id, kind, component_id, key_id, box,
                             expires_at)
VALUES ($1, $2::uuid, $3::uuid, $4, $5, $6, $7, $8)
"""
# the thread's newest live secret answers (what an agent's write is checked against)
LIVE_ANSWERS = f"""
SELECT {COLUMNS} FROM message_secrets
 WHERE user_id = $1::uuid AND thread_id = $2::uuid AND kind = 'answer' AND state = 'sealed'
 ORDER BY message_id DESC LIMIT $3
"""
# the user's newest live secret answers in any thread (fields not yet in a thread)
LIVE_ANSWERS_OF_USER = f"""
SELECT {COLUMNS} FROM message_secrets
 WHERE user_id = $1::uuid AND kind = 'answer' AND state = 'sealed'
 ORDER BY message_id DESC LIMIT $2
"""


def live_rows(array: list[tuple[object, ...]] | None) -> list[SecretRow]:
    """The rows of a live-secrets array column (``components.tool_store.POST_CONTEXT`` writes
    the subquery out whole, in ``COLUMNS``' order), as ``live_answers`` returns them."""
    return [SecretRow(*tuple(r)) for r in array or []]  # type: ignore[arg-type]


OF_MESSAGES = f"""
SELECT {COLUMNS} FROM message_secrets WHERE user_id = $1::uuid AND message_id = ANY($2::bigint[])
"""
EXPIRE_DUE = """
WITH due AS (
    SELECT user_id, message_id FROM message_secrets
     WHERE state = 'sealed' AND expires_at <= $1 ORDER BY expires_at LIMIT $2
       FOR UPDATE SKIP LOCKED
)
UPDATE message_secrets s SET state = 'expired', key_id = NULL, box = NULL, expired_at = $1
  FROM due WHERE s.user_id = due.user_id AND s.message_id = due.message_id
RETURNING s.message_id
"""
PURGE_THREAD = """
UPDATE message_secrets SET state = 'expired', key_id = NULL, box = NULL, expired_at = $3
 WHERE user_id = $1::uuid AND thread_id = $2::uuid AND state = 'sealed'
RETURNING message_id
"""
THREAD_OWNER = "SELECT user_id::text FROM threads WHERE id = $1::uuid"
KEY_USAGE = """
SELECT key_id, count(*) AS n FROM message_secrets WHERE state = 'sealed' GROUP BY key_id
 ORDER BY key_id
"""
ROTATE_PICK = f"""
SELECT {COLUMNS} FROM message_secrets
 WHERE state = 'sealed' AND key_id <> $1 AND message_id > $2
 ORDER BY message_id LIMIT $3 FOR UPDATE SKIP LOCKED
"""
ROTATE_WRITE = """
UPDATE message_secrets s SET key_id = $1, box = u.box
  FROM unnest($2::uuid[], $3::bigint[], $4::bytea[]) AS u(user_id, message_id, box)
 WHERE s.user_id = u.user_id AND s.message_id = u.message_id AND s.state = 'sealed'
"""
# sensitive answer rows written before 0005 still hold their plaintext in messages.body
LEGACY_PLAINTEXT = """
SELECT m.id, m.user_id::text, m.thread_id::text, m.body, m.created_at,
       m.source_meta -> 'componentAnswer' ->> 'componentId' AS component_id
  FROM messages m
 WHERE m.sensitive AND m.role = 'user' AND m.body IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM message_secrets s WHERE s.message_id = m.id)
 ORDER BY m.id LIMIT $1
 FOR UPDATE OF m SKIP LOCKED
"""
ANY_PLAINTEXT = """
SELECT EXISTS (SELECT 1 FROM messages m
                WHERE m.sensitive AND m.role = 'user' AND m.body IS NOT NULL
                  AND NOT EXISTS (SELECT 1 FROM message_secrets s WHERE s.message_id = m.id))
"""
ANY_PLAINTEXT_BEFORE_0005 = """
SELECT EXISTS (SELECT 1 FROM messages WHERE sensitive AND role = 'user' AND body IS NOT NULL)
"""
SET_BODY = "UPDATE messages SET body = $3 WHERE user_id = $1::uuid AND id = $2"


async def insert(conn: asyncpg.Connection, *, message_id: int, user_id: str, thread_id: str,
                 kind: str, component_id: str | None, key_id: str, box: bytes,
                 expires_at: datetime) -> None:
    await conn.execute(INSERT, message_id, user_id, thread_id, kind, component_id, key_id, box,
                       expires_at)


async def live_answers(conn: asyncpg.Connection, user_id: str, thread_id: str,
                       limit: int) -> list[SecretRow]:
    return [SecretRow.from_record(r)
            for r in await conn.fetch(LIVE_ANSWERS, user_id, thread_id, limit)]


async def live_answers_of_user(conn: asyncpg.Connection, user_id: str,
                               limit: int) -> list[SecretRow]:
    return [SecretRow.from_record(r)
            for r in await conn.fetch(LIVE_ANSWERS_OF_USER, user_id, limit)]


async def of_messages(conn: asyncpg.Connection, user_id: str,
                      message_ids: list[int]) -> dict[int, SecretRow]:
    rows = await conn.fetch(OF_MESSAGES, user_id, message_ids)
    return {r["message_id"]: SecretRow.from_record(r) for r in rows}


async def expire_due(conn: asyncpg.Connection, now: datetime, limit: int) -> int:
    return len(await conn.fetch(EXPIRE_DUE, now, limit))


async def thread_owner(conn: asyncpg.Connection, thread_id: str) -> str | None:
    owner: str | None = await conn.fetchval(THREAD_OWNER, thread_id)
    return owner


async def purge_thread(conn: asyncpg.Connection, user_id: str, thread_id: str,
                       now: datetime) -> int:
    return len(await conn.fetch(PURGE_THREAD, user_id, thread_id, now))


async def key_usage(conn: asyncpg.Connection) -> dict[str, int]:
    return {r["key_id"]: r["n"] for r in await conn.fetch(KEY_USAGE)}


async def rotate_pick(conn: asyncpg.Connection, key_id: str, after: int,
                      limit: int) -> list[SecretRow]:
    return [SecretRow.from_record(r) for r in await conn.fetch(ROTATE_PICK, key_id, after, limit)]


async def rotate_write(conn: asyncpg.Connection, key_id: str, rows: list[tuple[str, int]],
                       boxes: list[bytes]) -> None:
    """Store ``boxes`` re-sealed under ``key_id`` for the rows ``(user_id, message id)``."""
    await conn.execute(ROTATE_WRITE, key_id, [u for u, _ in rows], [i for _, i in rows], boxes)


async def legacy_plaintext(conn: asyncpg.Connection, limit: int) -> list[LegacyPlaintextRow]:
    return [LegacyPlaintextRow.from_record(r) for r in await conn.fetch(LEGACY_PLAINTEXT, limit)]


async def set_body(conn: asyncpg.Connection, user_id: str, message_id: int, body: str) -> None:
    await conn.execute(SET_BODY, user_id, message_id, body)
