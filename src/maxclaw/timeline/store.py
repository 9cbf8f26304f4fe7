"""SQL for threads, messages and turn wake-ups. Every query is scoped by ``user_id``."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from maxclaw.errors import NotFound
from maxclaw.timeline.rows import InputRow, MessageRow, Sealed, ThreadRow

THREAD_COLUMNS = ("id::text, user_id::text, kind, category, title, turn_state, open_cards,"
                  " cardinality(background_jobs) AS background_jobs, created_at, rev, archived_at")
MESSAGE_COLUMNS = (
    "id, user_id::text, thread_id::text, role, body, content, tool_calls, tool_call_id, display,"
    " source_meta, sensitive, turn_id, delivered_at, created_at, rev"
)

# archived threads only when asked for ($3)
LIST_THREADS = f"""
SELECT {THREAD_COLUMNS} FROM threads
 WHERE user_id = $1::uuid AND ($3 OR archived_at IS NULL)
 ORDER BY created_at, id LIMIT $2
"""
GET_THREAD = f"SELECT {THREAD_COLUMNS} FROM threads WHERE user_id = $1::uuid AND id = $2::uuid"
INSERT_THREAD = f"""
INSERT INTO threads (user_id, kind, title, category) VALUES ($1::uuid, $2, $3, $4)
RETURNING {THREAD_COLUMNS}
"""
# A page is cut by rows ($4) and by bytes ($5): a row is kept while the rows before it hold
# fewer than $5 bytes (so the first row always comes). A row's bytes are every column the page
# returns (``messages.size``, stored with the row, ``source_meta`` included), so a page of
# 1 MiB rows is neither read (and projected on the event loop) to be thrown away nor measured
# by reading each row's text.
LIST_MESSAGES = f"""
SELECT {MESSAGE_COLUMNS} FROM (
    SELECT *, sum(size) OVER (ORDER BY id) - size AS before FROM (
        SELECT *
          FROM messages
         WHERE user_id = $1::uuid AND thread_id = $2::uuid AND id > $3
         ORDER BY id LIMIT $4) sized) page
 WHERE before < $5
 ORDER BY id
"""
# The page just before a message ($3; the newest page: a $3 past every id), read backwards and
# cut the same way from its newest row, returned in id order: the WebUI opens a thread on its
# newest page and loads older ones as Max scrolls up.
LIST_MESSAGES_BEFORE = f"""
SELECT {MESSAGE_COLUMNS} FROM (
    SELECT *, sum(size) OVER (ORDER BY id DESC) - size AS after FROM (
        SELECT *
          FROM messages
         WHERE user_id = $1::uuid AND thread_id = $2::uuid AND id < $3
         ORDER BY id DESC LIMIT $4) sized) page
 WHERE after < $5
 ORDER BY id
"""
# The same insert answering only the row's id: a runtime's post needs no more, and reading a
# 1 MiB row back would decode it on the event loop for nothing.
# $12: written delivered (history, not input: an event that wakes nothing, e.g. a background
# job's start; an undelivered row would make a turn's finish queue another turn for it).
INSERT_MESSAGE_ID = """
INSERT INTO messages (user_id, thread_id, role, body, content, tool_calls, tool_call_id, display,
                      source_meta, sensitive, turn_id, delivered_at)
VALUES ($1::uuid, $2::uuid, $3, $4, $5::jsonb, $6::jsonb, $7, $8::jsonb, $9::jsonb, $10, $11,
        CASE WHEN $12::boolean THEN now() END)
RETURNING id
"""
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
# A background job a runtime reported started joins its thread's set of running jobs, and
# leaves it when reported finished (turns/background.py). A start posted twice or an end for a
# job never started changes nothing; an end that changes nothing writes nothing (no new rev).
JOB_STARTED = """
UPDATE threads SET background_jobs = CASE WHEN $3 = ANY(background_jobs) THEN background_jobs
                                          ELSE array_append(background_jobs, $3) END
 WHERE user_id = $1::uuid AND id = $2::uuid
RETURNING cardinality(background_jobs)
"""
JOB_FINISHED = """
UPDATE threads SET background_jobs = array_remove(background_jobs, $3)
 WHERE user_id = $1::uuid AND id = $2::uuid AND $3 = ANY(background_jobs)
"""
MAIN_THREAD = "SELECT id::text FROM threads WHERE user_id = $1::uuid AND kind = 'main'"
# A new input on an idle thread queues a turn; on a thread with a queued or running turn the
# partial unique index turns_one_active_per_thread makes this a no-op, and the input waits in
# the inbox for the running turn's next step boundary.
WAKE_THREAD = """
INSERT INTO turns (user_id, thread_id) VALUES ($1::uuid, $2::uuid)
ON CONFLICT (user_id, thread_id) WHERE status IN ('queued', 'running') DO NOTHING
"""


async def list_threads(conn: asyncpg.Connection, user_id: str, limit: int,
                       archived: bool = False) -> list[ThreadRow]:
    """The user's threads, oldest first (archived ones too with ``archived``)."""
    return [ThreadRow.from_record(r)
            for r in await conn.fetch(LIST_THREADS, user_id, limit, archived)]


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
HAS_BEFORE = """
SELECT EXISTS (SELECT 1 FROM messages WHERE user_id = $1::uuid AND thread_id = $2::uuid
                                        AND id < $3)
"""
PAGE_BYTES = 1024 * 1024  # a page's byte budget (tool calls count twice: definitions)


async def list_messages(conn: asyncpg.Connection, user_id: str, thread_id: str, after_id: int,
                        limit: int, max_bytes: int = PAGE_BYTES) -> list[MessageRow]:
    """A page of a thread's timeline in id order: at most ``limit`` rows and about
    ``max_bytes`` (always at least one row)."""
    return [MessageRow.from_record(r) for r in await conn.fetch(
        LIST_MESSAGES, user_id, thread_id, after_id, limit, max_bytes)]


async def list_messages_before(conn: asyncpg.Connection, user_id: str, thread_id: str,
                               before_id: int, limit: int,
                               max_bytes: int = PAGE_BYTES) -> list[MessageRow]:
    """The page of a thread's timeline just before ``before_id``, in id order: its newest
    ``limit`` rows within about ``max_bytes`` (always at least one row)."""
    return [MessageRow.from_record(r) for r in await conn.fetch(
        LIST_MESSAGES_BEFORE, user_id, thread_id, before_id, limit, max_bytes)]


async def has_message_before(conn: asyncpg.Connection, user_id: str, thread_id: str,
                             message_id: int) -> bool:
    return bool(await conn.fetchval(HAS_BEFORE, user_id, thread_id, message_id))


async def has_message_after(conn: asyncpg.Connection, user_id: str, thread_id: str,
                            message_id: int) -> bool:
    return bool(await conn.fetchval(HAS_AFTER, user_id, thread_id, message_id))


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


async def insert_message_id(
    conn: asyncpg.Connection, *, user_id: str, thread_id: str, role: str,
    body: str | None = None, content: object = None, tool_calls: object = None,
    tool_call_id: str | None = None, display: object = None, source_meta: object = None,
    sensitive: bool = False, turn_id: int | None = None, delivered: bool = False,
) -> int:
    """``insert_message``, answering the new row's id only (``delivered``: an input row that
    is history, never handed to a model as new)."""
    return int(await conn.fetchval(INSERT_MESSAGE_ID, user_id, thread_id, role, body, content,
                                   tool_calls, tool_call_id, display, source_meta, sensitive,
                                   turn_id, delivered))


async def wake_thread(conn: asyncpg.Connection, user_id: str, thread_id: str) -> None:
    """Queue a turn unless one is already queued or running."""
    await conn.execute(WAKE_THREAD, user_id, thread_id)


async def job_started(conn: asyncpg.Connection, user_id: str, thread_id: str,
                      job_id: str) -> int:
    """Count the job as running in its thread; answers how many run there now."""
    return int(await conn.fetchval(JOB_STARTED, user_id, thread_id, job_id) or 0)


async def job_finished(conn: asyncpg.Connection, user_id: str, thread_id: str,
                       job_id: str) -> None:
    """The job no longer runs in its thread."""
    await conn.execute(JOB_FINISHED, user_id, thread_id, job_id)


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


# Events for a thread that must not wake it but that a turn working on it now must read (Main
# told that a card it held is settled, withdrawn, expired or back with Max): undelivered while
# the thread has a queued or running turn — the inbox hands them over at the model's next step
# (or its finish queues the next turn for them) — else written delivered, history its next turn
# reads, never input waiting with no turn to read it. The threads are locked first, in id
# order, by a statement of their own (LOCK_THREADS_KEY_SHARE): a finish (which locks its thread
# FOR UPDATE) either committed before, and INSERT_NOTICES' new snapshot sees the thread idle,
# or waits for this transaction and then sees the undelivered row.
LOCK_THREADS_KEY_SHARE = """
SELECT t.id FROM threads t
  JOIN unnest($1::uuid[], $2::uuid[]) AS x(user_id, id) ON t.user_id = x.user_id AND t.id = x.id
 ORDER BY t.id FOR KEY SHARE OF t
"""
INSERT_NOTICES = """
INSERT INTO messages (user_id, thread_id, role, body, source_meta, delivered_at)
SELECT u.user_id, u.thread_id, 'event', u.body, u.source_meta,
       CASE WHEN EXISTS (SELECT 1 FROM turns t
                          WHERE t.user_id = u.user_id AND t.thread_id = u.thread_id
                            AND t.status IN ('queued', 'running'))
            THEN NULL ELSE now() END
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


async def insert_notices(conn: asyncpg.Connection, rows: list[NewEvent]) -> None:
    """Append event rows that wake nothing but reach a turn working on their thread now
    (``INSERT_NOTICES``): two statements for any number of rows."""
    if not rows:
        return
    threads = sorted({(r.user_id, r.thread_id) for r in rows}, key=lambda k: k[1])
    await conn.execute(LOCK_THREADS_KEY_SHARE, [u for u, _ in threads], [t for _, t in threads])
    await conn.execute(INSERT_NOTICES, [r.user_id for r in rows], [r.thread_id for r in rows],
                       [r.body for r in rows], [r.source_meta for r in rows])
