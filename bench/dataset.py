"""Bulk data for the sweep and cost-growth runs, written straight in SQL (``generate_series``).

Each card is what the service itself would have written: the assistant row carrying the
``ask_user_question`` call, the tool row with ``display.states``, the component row, and its
``agent-question`` carrier. Rows get their ``rev``/``xid`` like the trigger would give them, but
the load runs with ``session_replication_role = replica`` (no per-row trigger or foreign-key
check) so a million cards load in seconds rather than minutes.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import asyncpg

from maxclaw.cards.text import ASK_NOTE
from maxclaw.db.database import connect

CARD_ARGS: dict[str, Any] = {
    "title": "Rename the status field",
    "questions": [{"id": "q1", "kind": "choice", "question": "Keep the old field for one version?",
                   "options": [{"id": "keep", "label": "Keep one version", "recommended": True},
                               {"id": "drop", "label": "Remove it now"}],
                   "multiple": False, "allow_other": True}],
}
CARD_OPTIONS = [{"id": "keep", "label": "Keep one version", "recommended": True},
                {"id": "drop", "label": "Remove it now", "recommended": False}]
USERS = 100  # bulk cards spread over this many users (each with a Main thread)
CARDS_PER_THREAD = 10


async def _replica_mode(conn: asyncpg.Connection) -> bool:
    """Skip triggers and FK checks for this transaction when we may (superuser); else not."""
    try:
        async with conn.transaction():
            await conn.execute("SET LOCAL session_replication_role = replica")
        return True
    except asyncpg.InsufficientPrivilegeError:
        return False


async def ensure_users(conn: asyncpg.Connection, users: int = USERS) -> None:
    """The bulk users and their Main threads (idempotent)."""
    await conn.execute("""
        INSERT INTO users (name) SELECT 'bulk_' || g FROM generate_series(1, $1) g
        ON CONFLICT (name) DO NOTHING""", users)
    await conn.execute("""
        INSERT INTO threads (user_id, kind, title)
        SELECT u.id, 'main', 'Main' FROM users u
         WHERE u.name LIKE 'bulk\\_%' AND NOT EXISTS (
               SELECT 1 FROM threads t WHERE t.user_id = u.id AND t.kind = 'main')""")


# One multi-statement script; its parameters arrive as transaction-local settings (bench.*),
# read once into the one-row table p.
LOAD_SQL = r"""
CREATE TEMP TABLE p ON COMMIT DROP AS
SELECT current_setting('bench.tag') AS tag, current_setting('bench.count')::int AS n,
       current_setting('bench.first')::bigint AS first_id,
       current_setting('bench.per_thread')::int AS per_thread,
       current_setting('bench.due')::bool AS due,
       current_setting('bench.args')::jsonb AS args,
       current_setting('bench.options')::jsonb AS options,
       current_setting('bench.title') AS title, current_setting('bench.question') AS question,
       current_setting('bench.note') AS note,
       (SELECT array_agg(id ORDER BY name) FROM users WHERE name LIKE 'bulk\_%') AS users;

CREATE TEMP TABLE bulk_threads ON COMMIT DROP AS
SELECT g AS idx, gen_random_uuid() AS id, p.users[1 + g % cardinality(p.users)] AS user_id
  FROM p, generate_series(0, (p.n - 1) / p.per_thread) g;

INSERT INTO threads (id, user_id, kind, title, rev, xid)
SELECT id, user_id, 'normal', 'bulk ' || idx, nextval('maxclaw_rev_seq'), pg_current_xact_id()
  FROM bulk_threads;

CREATE TEMP TABLE bulk_cards ON COMMIT DROP AS
SELECT g, p.tag || '_' || g AS call_id, t.id AS thread_id, t.user_id,
       p.first_id + 2 * g AS assistant_id, p.first_id + 2 * g + 1 AS tool_id,
       CASE WHEN p.due THEN 'open' WHEN g % 2 = 0 THEN 'answered' ELSE 'open' END AS status,
       CASE WHEN p.due THEN now() - interval '1 minute' - make_interval(secs => g % 600)
            WHEN g % 2 = 0 THEN NULL
            ELSE now() + interval '1 hour' + make_interval(mins => g % 43200) END AS due_at
  FROM p CROSS JOIN generate_series(0, p.n - 1) g
  JOIN bulk_threads t ON t.idx = g / p.per_thread;

INSERT INTO messages (id, user_id, thread_id, role, tool_calls, rev, xid)
SELECT c.assistant_id, c.user_id, c.thread_id, 'assistant',
       jsonb_build_array(jsonb_build_object('id', c.call_id, 'name', 'ask_user_question',
                                            'arguments', p.args)),
       nextval('maxclaw_rev_seq'), pg_current_xact_id()
  FROM bulk_cards c, p;

INSERT INTO decisions (user_id, kind, status, dedupe_key, component_id, thread_id, title, body,
                       options, allow_text, answer_text, settled_via, settled_at, rev, xid)
SELECT c.user_id, 'agent-question',
       CASE WHEN c.status = 'answered' THEN 'settled' ELSE 'open' END,
       'ask:' || c.call_id || ':q1', c.call_id || ':q1', c.thread_id, p.title, p.question,
       p.options, true,
       CASE WHEN c.status = 'answered' THEN 'Keep one version' END,
       CASE WHEN c.status = 'answered' THEN 'card' END,
       CASE WHEN c.status = 'answered' THEN now() END,
       nextval('maxclaw_rev_seq'), pg_current_xact_id()
  FROM bulk_cards c, p;

INSERT INTO messages (id, user_id, thread_id, role, tool_call_id, content, display, source_meta,
                      rev, xid)
SELECT c.tool_id, c.user_id, c.thread_id, 'tool', c.call_id,
       jsonb_build_object('posted', true, 'note', p.note, 'components', jsonb_build_array(
           jsonb_build_object('id', c.call_id || ':q1', 'kind', 'choice',
                              'answer_due_at', coalesce(c.due_at, now())))),
       jsonb_build_object('v', 1, 'kind', 'components', 'states', jsonb_build_object(
           c.call_id || ':q1', jsonb_build_object(
               'status', c.status,
               'answered_by', CASE WHEN c.status = 'answered' THEN 'max' END,
               'answered_via', CASE WHEN c.status = 'answered' THEN 'card' END,
               'answer', CASE WHEN c.status = 'answered'
                              THEN '{"selected": ["keep"], "text": null}'::jsonb END,
               'due_at', c.due_at))),
       '{"tool": {"name": "ask_user_question", "status": 200}}'::jsonb,
       nextval('maxclaw_rev_seq'), pg_current_xact_id()
  FROM bulk_cards c, p;

INSERT INTO message_components (id, user_id, thread_id, message_id, tool_message_id, kind,
                                status, answer, answered_by, answered_via, due_at, decision_id,
                                answered_at)
SELECT c.call_id || ':q1', c.user_id, c.thread_id, c.assistant_id, c.tool_id, 'choice', c.status,
       CASE WHEN c.status = 'answered' THEN '{"selected": ["keep"], "text": null}'::jsonb END,
       CASE WHEN c.status = 'answered' THEN 'max' END,
       CASE WHEN c.status = 'answered' THEN 'card' END,
       c.due_at, d.id, CASE WHEN c.status = 'answered' THEN now() END
  FROM bulk_cards c JOIN decisions d ON d.dedupe_key = 'ask:' || c.call_id || ':q1';
"""


async def reserve_message_ids(conn: asyncpg.Connection, count: int) -> int:
    """Take ``count`` consecutive message ids; returns the first. Call it from one connection
    at a time (loads reserve every chunk's range before the chunks run in parallel)."""
    seq = "pg_get_serial_sequence('messages', 'id')"
    first = int(await conn.fetchval(f"SELECT nextval({seq})"))
    await conn.execute(f"SELECT setval({seq}, $1)", first + count)
    return first


async def load_cards(conn: asyncpg.Connection, tag: str, count: int, *, due: bool,
                     first_id: int) -> None:
    """Insert ``count`` cards in one transaction, their messages numbered from ``first_id``
    (2 per card, reserved with ``reserve_message_ids``); ``due`` makes them all due now (else
    half answered, half open with a due time from one hour to 30 days ahead: in the sweep's
    index, but not due). Call ``ensure_users`` first."""
    async with conn.transaction():
        if await _replica_mode(conn):
            await conn.execute("SET LOCAL session_replication_role = replica")
        await conn.execute("SET LOCAL maxclaw.notify = 'off'")
        params = {"tag": f"bk{tag}", "count": count, "first": first_id,
                  "args": json.dumps(CARD_ARGS), "per_thread": CARDS_PER_THREAD,
                  "due": due, "title": CARD_ARGS["title"],
                  "question": CARD_ARGS["questions"][0]["question"],
                  "options": json.dumps(CARD_OPTIONS), "note": ASK_NOTE}
        for name, value in params.items():
            await conn.execute("SELECT set_config($1, $2, true)", f"bench.{name}",
                               str(value).lower() if isinstance(value, bool) else str(value))
        await conn.execute(LOAD_SQL)  # no arguments: one multi-statement simple query


async def load(url: str, tag: str, count: int, *, due: bool, workers: int = 2,
               chunk: int = 200_000, progress: Callable[[int], None] | None = None) -> float:
    """Load ``count`` cards in chunks over ``workers`` connections, then ANALYZE; seconds."""
    t0 = time.perf_counter()
    sizes = [min(chunk, count - start) for start in range(0, count, chunk)]
    conn = await connect(url)
    try:
        await ensure_users(conn)
        # ranges are reserved one after the other here: two chunks taking theirs at the same
        # moment could overlap (nextval, then setval, is not one step) and deadlock
        firsts = [await reserve_message_ids(conn, 2 * size + 1) for size in sizes]
    finally:
        await conn.close()
    gate = asyncio.Semaphore(workers)
    done = 0

    async def one(k: int, size: int) -> None:
        nonlocal done
        async with gate:
            c = await connect(url)
            try:
                await load_cards(c, f"{tag}{k}", size, due=due, first_id=firsts[k])
            finally:
                await c.close()
            done += size
            if progress:
                progress(done)

    await asyncio.gather(*(one(k, size) for k, size in enumerate(sizes)))
    conn = await connect(url)
    try:
        await conn.execute("ANALYZE threads, messages, decisions, message_components")
    finally:
        await conn.close()
    return time.perf_counter() - t0
