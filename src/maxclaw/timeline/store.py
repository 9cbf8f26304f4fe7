"""SQL for threads, messages and turn wake-ups. Every query is scoped by ``user_id``."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from maxclaw.errors import NotFound
from maxclaw.timeline.rows import InputRow, MessageRow, Sealed, ThreadRow

THREAD_COLUMNS = ("id::text, user_id::text, kind, category, title, turn_state, open_cards,"
                  " created_at, rev")
MESSAGE_COLUMNS = (
    "id, user_id::text, thread_id::text, role, body, content, tool_calls, tool_call_id, display,"
    " source_meta, sensitive, turn_id, delivered_at, created_at, rev"
)

LIST_THREADS = f"""
SELECT {THREAD_COLUMNS} FROM threads WHERE user_id = $1::uuid ORDER BY created_at, id LIMIT $2
"""
GET_THREAD = f"SELECT {THREAD_COLUMNS} FROM threads WHERE user_id = $1::uuid AND id = $2::uuid"
INSERT_THREAD = f"""
INSERT INTO threads (user_id, kind, title, category) VALUES ($1::uuid, $2, $3, $4)
RETURNING {THREAD_COLUMNS}
"""
# A page is cut by rows ($4) and by bytes ($5): a row is kept while the rows before it hold
# fewer than $5 bytes (so the first row always comes). Measured in the database, so a page of
# 1 MiB rows is not read (and projected on the event loop) to be thrown away.
LIST_MESSAGES = f"""
SELECT {MESSAGE_COLUMNS} FROM (
    SELECT *, sum(size) OVER (ORDER BY id) - size AS before FROM (
        SELECT *, octet_length(coalesce(body, '')) + octet_length(coalesce(content::text, ''))
                  + 2 * octet_length(coalesce(tool_calls::text, ''))
                  + octet_length(coalesce(display::text, '')) AS size
          FROM messages
         WHERE user_id = $1::uuid AND thread_id = $2::uuid AND id > $3
         ORDER BY id LIMIT $4) sized) page
 WHERE before < $5
 ORDER BY id
"""
GET_MESSAGE = f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE user_id = $1::uuid AND id = $2"
INSERT_MESSAGE = f"""
INSERT INTO messages (user_id, thread_id, role, body, content, tool_calls, tool_call_id, display,
                      source_meta, sensitive, turn_id)
VALUES ($1::uuid, $2::uuid, $3, $4, $5::jsonb, $6::jsonb, $7, $8::jsonb, $9::jsonb, $10, $11)
RETURNING {MESSAGE_COLUMNS}
"""
# An input row (user message, answer, event) and the thread's wake-up in one statement.
# The thread is locked first, explicitly: the foreign key's own lock on it comes only at the
# end of the statement, after the wake-up, and TurnService.finish relies on that lock to
# order an input against the turn it ends (without it, finish could end the turn between
# this wake-up's no-op and this commit, and the input would wait with no turn to read it).
INSERT_INPUT_AND_WAKE = f"""
WITH thread AS (
    SELECT id FROM threads WHERE user_id = $1::uuid AND id = $2::uuid FOR KEY SHARE
), msg AS (
    INSERT INTO messages (user_id, thread_id, role, body, display, source_meta, sensitive)
    SELECT $1::uuid, thread.id, $3, $4, $5::jsonb, $6::jsonb, $7 FROM thread
    RETURNING {MESSAGE_COLUMNS}
), wake AS (
    INSERT INTO turns (user_id, thread_id) SELECT $1::uuid, $2::uuid FROM msg
    ON CONFLICT (user_id, thread_id) WHERE status IN ('queued', 'running') DO NOTHING
)
SELECT * FROM msg
"""
# The same for a secret answer: its sealed box (maxclaw.secrets) goes in with the row.
INSERT_SECRET_INPUT_AND_WAKE = f"""
WITH thread AS (
    SELECT id FROM threads WHERE user_id = $1::uuid AND id = $2::uuid FOR KEY SHARE
), msg AS (
    INSERT INTO messages (user_id, thread_id, role, body, display, source_meta, sensitive)
    SELECT $1::uuid, thread.id, $3, $4, $5::jsonb, $6::jsonb, $7 FROM thread
    RETURNING {MESSAGE_COLUMNS}
), box AS (
    INSERT INTO message_secrets (message_id, user_id, thread_id, kind, component_id, key_id,
                                 box, expires_at)
    SELECT msg.id, $1::uuid, $2::uuid, $8, $9, $10, $11, $12 FROM msg
), wake AS (
    INSERT INTO turns (user_id, thread_id) SELECT $1::uuid, $2::uuid FROM msg
    ON CONFLICT (user_id, thread_id) WHERE status IN ('queued', 'running') DO NOTHING
)
SELECT * FROM msg
"""
MAIN_THREAD = "SELECT id::text FROM threads WHERE user_id = $1::uuid AND kind = 'main'"
# A new input on an idle thread queues a turn; on a thread with a queued or running turn the
# partial unique index turns_one_active_per_thread makes this a no-op, and the input waits in
# the inbox for the running turn's next step boundary.
WAKE_THREAD = """
INSERT INTO turns (user_id, thread_id) VALUES ($1::uuid, $2::uuid)
ON CONFLICT (user_id, thread_id) WHERE status IN ('queued', 'running') DO NOTHING
"""


async def list_threads(conn: asyncpg.Connection, user_id: str, limit: int) -> list[ThreadRow]:
    """The user's threads, oldest first."""
    return [ThreadRow.from_record(r) for r in await conn.fetch(LIST_THREADS, user_id, limit)]


async def get_thread(conn: asyncpg.Connection, user_id: str,
                     thread_id: str) -> ThreadRow | None:
    row = await conn.fetchrow(GET_THREAD, user_id, thread_id)
    return ThreadRow.from_record(row) if row else None


async def insert_thread(conn: asyncpg.Connection, user_id: str, kind: str, title: str,
                        category: str | None) -> ThreadRow:
    return ThreadRow.from_record(
        await conn.fetchrow(INSERT_THREAD, user_id, kind, title, category))


HAS_AFTER = """
SELECT EXISTS (SELECT 1 FROM messages WHERE user_id = $1::uuid AND thread_id = $2::uuid
                                        AND id > $3)
"""
PAGE_BYTES = 1024 * 1024  # a page's byte budget (tool calls count twice: definitions)


async def list_messages(conn: asyncpg.Connection, user_id: str, thread_id: str, after_id: int,
                        limit: int, max_bytes: int = PAGE_BYTES) -> list[MessageRow]:
    """A page of a thread's timeline in id order: at most ``limit`` rows and about
    ``max_bytes`` (always at least one row)."""
    return [MessageRow.from_record(r) for r in await conn.fetch(
        LIST_MESSAGES, user_id, thread_id, after_id, limit, max_bytes)]


async def has_message_after(conn: asyncpg.Connection, user_id: str, thread_id: str,
                            message_id: int) -> bool:
    return bool(await conn.fetchval(HAS_AFTER, user_id, thread_id, message_id))


async def get_message(conn: asyncpg.Connection, user_id: str,
                      message_id: int) -> MessageRow | None:
    row = await conn.fetchrow(GET_MESSAGE, user_id, message_id)
    return MessageRow.from_record(row) if row else None


async def insert_message(
    conn: asyncpg.Connection, *, user_id: str, thread_id: str, role: str,
    body: str | None = None, content: object = None, tool_calls: object = None,
    tool_call_id: str | None = None, display: object = None, source_meta: object = None,
    sensitive: bool = False, turn_id: int | None = None,
) -> MessageRow:
    """Append one row to a thread's timeline (the JSON columns as the caller's values)."""
    row = await conn.fetchrow(INSERT_MESSAGE, user_id, thread_id, role, body, content, tool_calls,
                              tool_call_id, display, source_meta, sensitive, turn_id)
    return MessageRow.from_record(row)


async def wake_thread(conn: asyncpg.Connection, user_id: str, thread_id: str) -> None:
    """Queue a turn unless one is already queued or running."""
    await conn.execute(WAKE_THREAD, user_id, thread_id)


async def main_thread_id(conn: asyncpg.Connection, user_id: str) -> str:
    """The user's Main thread (every user has exactly one)."""
    return str(await conn.fetchval(MAIN_THREAD, user_id))


async def insert_input_and_wake(
    conn: asyncpg.Connection, *, user_id: str, thread_id: str, role: str, body: str | None,
    display: object = None, source_meta: object = None, sensitive: bool = False,
    secret: Sealed | None = None,
) -> MessageRow:
    """Append an input row (it waits in the inbox) and queue a turn unless one is active;
    ``secret`` is the row's sealed box (the row is then sensitive)."""
    if secret is not None:
        row = await conn.fetchrow(INSERT_SECRET_INPUT_AND_WAKE, user_id, thread_id, role, body,
                                  display, source_meta, True, secret.kind, secret.component_id,
                                  secret.key_id, secret.box, secret.expires_at)
    else:
        row = await conn.fetchrow(INSERT_INPUT_AND_WAKE, user_id, thread_id, role, body,
                                  display, source_meta, sensitive)
    if row is None:
        raise NotFound("No such thread.")
    return MessageRow.from_record(row)


MAIN_THREADS = """
SELECT user_id::text, id::text FROM threads WHERE kind = 'main' AND user_id = ANY($1::uuid[])
"""
# Several input rows and their wake-ups; the threads are locked first, as above.
INSERT_INPUTS_AND_WAKE = """
WITH thread AS (
    SELECT user_id, id FROM threads
     WHERE (user_id, id) IN (SELECT * FROM unnest($1::uuid[], $2::uuid[]))
     ORDER BY id FOR KEY SHARE
), msgs AS (
    INSERT INTO messages (user_id, thread_id, role, body, source_meta)
    SELECT u.user_id, thread.id, u.role, u.body, u.source_meta
      FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::jsonb[]) WITH ORDINALITY
           AS u(user_id, thread_id, role, body, source_meta, n)
      JOIN thread ON thread.user_id = u.user_id AND thread.id = u.thread_id
     ORDER BY u.n
    RETURNING user_id, thread_id
)
INSERT INTO turns (user_id, thread_id)
SELECT DISTINCT user_id, thread_id FROM msgs ORDER BY thread_id
ON CONFLICT (user_id, thread_id) WHERE status IN ('queued', 'running') DO NOTHING
"""


async def main_thread_ids(conn: asyncpg.Connection, user_ids: list[str]) -> dict[str, str]:
    """Each user's Main thread."""
    return {r["user_id"]: r["id"] for r in await conn.fetch(MAIN_THREADS, user_ids)}


async def insert_inputs_and_wake(conn: asyncpg.Connection, rows: list[InputRow]) -> None:
    """Append several input rows and wake each thread they went to, in one statement
    (threads woken in id order)."""
    await conn.execute(INSERT_INPUTS_AND_WAKE, [r.user_id for r in rows],
                       [r.thread_id for r in rows], [r.role for r in rows],
                       [r.body for r in rows], [r.source_meta for r in rows])


# Several event rows that wake nothing (history only: the asking thread learns where its
# question went), in one statement. They are written delivered: they are history the next
# window shows, not input — an undelivered row would make the running turn's finish queue
# another turn for it (a wake-up in all but name) and count as input with no turn to read it.
INSERT_EVENTS = """
INSERT INTO messages (user_id, thread_id, role, body, source_meta, delivered_at)
SELECT u.user_id, u.thread_id, 'event', u.body, u.source_meta, now()
  FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::jsonb[]) WITH ORDINALITY
       AS u(user_id, thread_id, body, source_meta, n)
 ORDER BY u.n
"""


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event row to append (``insert_events``)."""

    user_id: str
    thread_id: str
    body: str
    source_meta: dict[str, object]


async def insert_events(conn: asyncpg.Connection, rows: list[NewEvent]) -> None:
    """Append several non-waking event rows in one statement."""
    if not rows:
        return
    await conn.execute(INSERT_EVENTS, [r.user_id for r in rows], [r.thread_id for r in rows],
                       [r.body for r in rows], [r.source_meta for r in rows])
