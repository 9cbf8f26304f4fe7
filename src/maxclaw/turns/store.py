"""SQL for turns, deliveries and the fencing token. Every query a caller makes is scoped by
``user_id``; only the lapse sweep (a system job, like the due sweep) looks across users.

A turn is ``queued`` → ``running`` → ``done``, or ``running`` → ``lapsed`` when its lease ran
out: the lapsed row stays as it was (its id now fences stale writers) and a *new* queued turn
takes over the work. The partial unique index ``turns_one_active_per_thread`` keeps at most one
queued or running turn per thread; the ``turns_changed`` trigger mirrors it into
``threads.turn_state`` and NOTIFYs ``maxclaw_turn`` when a turn becomes queued.
"""

from __future__ import annotations

from datetime import datetime

import asyncpg

from maxclaw.components import machine
from maxclaw.components.machine import statuses
from maxclaw.timefmt import rfc3339
from maxclaw.timeline.rows import MessageRow
from maxclaw.timeline.store import MESSAGE_COLUMNS, wake_thread
from maxclaw.turns.rows import LapsedTurn, PickedTurn, TurnRow

TURN_COLUMNS = (
    "id, user_id::text, thread_id::text, status, runtime_id, lease_until, created_at, "
    "claimed_at, finished_at, delivered_through, forged_requeue"
)
# The components whose answers are still to come (what ``finish`` reports).
UNSETTLED = statuses(machine.UNSETTLED)

# The oldest queued turn the caller may run, locked; SKIP LOCKED lets any number of runtimes
# and API replicas claim at once without waiting on each other, and a turn is never claimed
# twice. Only locked here: the claim writes the turn last (START_TURN), after stamping the
# components it hands over. Writing it first deadlocked with a revoke, which locks its
# component and then wakes the thread (a wake-up waits for a turn being written).
# $3 false: not Main's turns (an agent token that is not Main's own; issue 14). The Main
# thread's id is one probe of threads_one_main_per_user, evaluated once for the statement.
PICK_NEXT = """
SELECT id, thread_id::text FROM turns
 WHERE user_id = $1::uuid AND status = 'queued'
   AND ($2::uuid IS NULL OR thread_id = $2::uuid)
   AND ($4::uuid[] IS NULL OR thread_id = ANY($4::uuid[]))
   AND ($3::boolean OR thread_id IS DISTINCT FROM
        (SELECT m.id FROM threads m WHERE m.user_id = $1::uuid AND m.kind = 'main'))
 ORDER BY id LIMIT 1
   FOR UPDATE SKIP LOCKED
"""
IS_MAIN = "SELECT kind = 'main' FROM threads WHERE user_id = $1::uuid AND id = $2::uuid"
START_TURN = f"""
UPDATE turns SET status = 'running', runtime_id = $2, lease_until = $3, claimed_at = $4,
       delivered_through = $5
 WHERE user_id = $6::uuid AND id = $1 AND status = 'queued'
RETURNING {TURN_COLUMNS}
"""
LOCK_TURN = f"SELECT {TURN_COLUMNS} FROM turns WHERE user_id = $1::uuid AND id = $2 FOR UPDATE"
EXTEND_LEASE = f"""
UPDATE turns SET lease_until = $3
 WHERE user_id = $1::uuid AND id = $2 AND status = 'running'
RETURNING {TURN_COLUMNS}
"""
# Max's Stop: the thread's running turn ends now. The UPDATE waits for a write holding the
# fencing lock (CURRENT_RUNNING_TURN's FOR SHARE) to commit, and every later write finds no
# running turn: a write lands wholly before the stop or is refused.
STOP_TURN = f"""
UPDATE turns SET status = 'stopped', finished_at = $3
 WHERE user_id = $1::uuid AND thread_id = $2::uuid AND status = 'running'
RETURNING {TURN_COLUMNS}
"""
TURN_STATUS = "SELECT status FROM turns WHERE user_id = $1::uuid AND id = $2"
FINISH_TURN = f"""
UPDATE turns SET status = 'done', finished_at = $3
 WHERE user_id = $1::uuid AND id = $2 AND status = 'running'
RETURNING {TURN_COLUMNS}
"""
SET_DELIVERED_THROUGH = """
UPDATE turns SET delivered_through = greatest(delivered_through, $3)
 WHERE user_id = $1::uuid AND id = $2
"""
# Leases that ran out, oldest first. SKIP LOCKED: a turn whose row a writer holds (the fencing
# check takes FOR SHARE) is being written right now; the next pass takes it.
LAPSE_EXPIRED = """
UPDATE turns SET status = 'lapsed', finished_at = $1
 WHERE id IN (SELECT id FROM turns
               WHERE status = 'running' AND lease_until < $1
               ORDER BY lease_until LIMIT $2
                 FOR UPDATE SKIP LOCKED)
RETURNING id, user_id::text, thread_id::text
"""
LAPSE_ONE = """
UPDATE turns SET status = 'lapsed', finished_at = $3
 WHERE user_id = $1::uuid AND id = $2 AND status = 'running' AND lease_until < $3
RETURNING id, user_id::text, thread_id::text
"""
# The fencing token: the thread's running turn, locked FOR SHARE so that it cannot lapse or
# finish between this check and the caller's commit (those updates wait for the lock).
CURRENT_RUNNING_TURN = """
SELECT id FROM turns
 WHERE user_id = $1::uuid AND thread_id = $2::uuid AND status = 'running'
   FOR SHARE
"""
LOCK_THREAD = "SELECT id FROM threads WHERE user_id = $1::uuid AND id = $2::uuid FOR UPDATE"
# The next turn, queued only so the model hears that its notice-shaped text was not ours.
WAKE_FOR_FORGED = """
INSERT INTO turns (user_id, thread_id, forged_requeue) VALUES ($1::uuid, $2::uuid, true)
ON CONFLICT (user_id, thread_id) WHERE status IN ('queued', 'running') DO NOTHING
"""

# The model window (claim, history): the newest rows before an optional ``before_id`` ($3,
# NULL: the thread's head), newest first in the index ``messages_thread_id`` (thread_id, id),
# at most $4 rows, and cut where the rows after a row (towards the head) already hold $5 bytes
# or more (so the newest row always comes). A row's size is its text as the model reads it
# (tool calls counted twice: their definitions) and every other column a page carries, stored
# with the row (``messages.size``), so a window of a thread of 1 MiB rows is neither read and
# decoded on the event loop to be thrown away nor measured by reading each row's text.
# The thread is a range of row values, not ``thread_id = $2``: with an equality the planner
# drops thread_id from the ORDER BY and may walk the primary key back from the table's newest
# row (it costs the thread index as random reads), reading every other thread on the way;
# a range over (thread_id, id) only this index can serve in order.
MODEL_WINDOW = f"""
SELECT {MESSAGE_COLUMNS} FROM (
    SELECT *, sum(size) OVER (ORDER BY id DESC) - size AS newer FROM (
        SELECT *
          FROM messages
         WHERE (thread_id, id) > ($2::uuid, 0)
           AND (thread_id, id) < ($2::uuid, coalesce($3::bigint, 9223372036854775807))
           AND user_id = $1::uuid
         ORDER BY thread_id DESC, id DESC LIMIT $4) sized) window_rows
 WHERE newer < $5
 ORDER BY id
"""
# Set in the window's transaction: the row-value range above is estimated poorly, and with a
# cursor in the middle of a long thread (or a generic plan, LIMIT unknown) the planner chose a
# bitmap scan of every older row of the thread, then a sort; the index walk reads the cap.
# The estimate depends on where the thread's uuid falls among the others, so now and then it
# chose a sequential scan of every message as well (tests/trust/test_model_window.py, 1 run
# in 3): both are off for this one statement. Under a busy parallel suite it also chose a walk
# of the primary key (user_id, id), every row of the user's, then a sort down to the cap: that
# plan is the only one needing a sort below the LIMIT, so sorts are off too (the two sorts of
# the capped rows above it are in every plan, and cost each the same).
# A disabled node is costed at 10^10, not refused, so the plan kept (with the two sorts above
# the cap) is costed at 2·10^10: past every JIT threshold, and a server with JIT (PostgreSQL's
# default, and Debian's build has it) compiled this three-row query with inlining and
# optimisation on every claim, 150-200 ms of the answer → claim wake-up (python -m bench
# --only-live: p50 171 ms; docs/benchmarks.md). JIT is off for the statement too.
WINDOW_PLAN = ("SET LOCAL enable_bitmapscan = off; SET LOCAL enable_seqscan = off; "
               "SET LOCAL enable_sort = off; SET LOCAL jit = off")
WINDOW_PLAN_DONE = "RESET enable_bitmapscan; RESET enable_seqscan; RESET enable_sort; RESET jit"
# Whether anything older than a window's first row is left for the cursor.
HAS_BEFORE = """
SELECT EXISTS (SELECT 1 FROM messages
                WHERE user_id = $1::uuid AND thread_id = $2::uuid AND id < $3)
"""
# A claim hands the model its window; input older than the window (reachable with the cursor)
# counts as delivered too, or every finish would queue a turn for rows no window shows.
DELIVER_THROUGH = """
WITH delivered AS (
    UPDATE messages SET delivered_at = $4
     WHERE user_id = $1::uuid AND thread_id = $2::uuid AND id <= $3
       AND delivered_at IS NULL AND role IN ('user', 'event')
    RETURNING 1)
SELECT count(*) FROM delivered
"""
# locked: a retract locks the answer message before its component too, so an answer is either
# handed over here or taken back, never both (components/retract_store.py)
UNDELIVERED_ROWS = f"""
SELECT {MESSAGE_COLUMNS} FROM messages
 WHERE user_id = $1::uuid AND thread_id = $2::uuid
   AND delivered_at IS NULL AND role IN ('user', 'event')
 ORDER BY id
   FOR UPDATE
"""
# Whether any of these rows was taken back (a retract won the row after the claim read it).
TAKEN_BACK = """
SELECT EXISTS (SELECT 1 FROM messages
                WHERE user_id = $1::uuid AND id = ANY($2::bigint[])
                  AND source_meta ? 'retracted')
"""
HAS_UNDELIVERED = """
SELECT EXISTS (SELECT 1 FROM messages
                WHERE user_id = $1::uuid AND thread_id = $2::uuid
                  AND delivered_at IS NULL AND role IN ('user', 'event'))
"""
MARK_DELIVERED = """
UPDATE messages SET delivered_at = $3
 WHERE user_id = $1::uuid AND id = ANY($2::bigint[]) AND delivered_at IS NULL
"""
FORGED_SINCE = f"""
SELECT {MESSAGE_COLUMNS} FROM messages
 WHERE user_id = $1::uuid AND thread_id = $2::uuid AND id > $3
   AND role = 'assistant' AND source_meta->>'guard' = 'forged'
 ORDER BY id
"""
LAST_MESSAGE_ID = """
SELECT coalesce(max(id), 0) FROM messages WHERE user_id = $1::uuid AND thread_id = $2::uuid
"""
# seen_at is stamped once: the first time a model is handed the answer; and mirrored into the
# card's ``display.states`` in the same statement (the rev trigger syncs every client, so the
# card says "seen by the agent" live). $4 is the instant as the wire writes it (timefmt).
STAMP_SEEN = """
WITH stamped AS (
    UPDATE message_components SET seen_at = $3, updated_at = now()
     WHERE user_id = $1::uuid AND id = ANY($2::text[]) AND seen_at IS NULL
    RETURNING id, tool_message_id
), patch AS (
    SELECT tool_message_id, array_agg(id) AS ids FROM stamped GROUP BY tool_message_id
), mirror AS (
    UPDATE messages m
       SET display = jsonb_set(m.display, '{states}', (
               SELECT jsonb_object_agg(e.k, CASE WHEN e.k = ANY(patch.ids)
                                                 THEN e.v || jsonb_build_object('seen_at', $4::text)
                                                 ELSE e.v END)
                 FROM jsonb_each(m.display -> 'states') AS e(k, v)))
      FROM patch
     WHERE m.user_id = $1::uuid AND m.id = patch.tool_message_id
       AND jsonb_typeof(m.display -> 'states') = 'object'
)
SELECT id FROM stamped
"""
# the tool rows whose cards have an answer no model has seen yet (a superset of what a delivery
# stamps), locked in id order
LOCK_UNSEEN_TOOL_ROWS = """
SELECT id FROM messages
 WHERE user_id = $1::uuid AND id IN (
           SELECT tool_message_id FROM message_components
            WHERE user_id = $1::uuid AND thread_id = $2::uuid AND seen_at IS NULL
              AND answered_at IS NOT NULL)
 ORDER BY id FOR UPDATE
"""
OPEN_COMPONENTS = """
SELECT id FROM message_components
 WHERE user_id = $1::uuid AND thread_id = $2::uuid AND status = ANY($3::text[])
 ORDER BY posted_at, id
"""


async def pick_next(conn: asyncpg.Connection, user_id: str, thread_id: str | None,
                    with_main: bool = True,
                    among: list[str] | None = None) -> PickedTurn | None:
    """Lock the oldest queued turn of the user's (or of one thread; of the threads ``among``
    when given; Main's only when ``with_main``) that no one else is claiming; None if there
    is none."""
    row = await conn.fetchrow(PICK_NEXT, user_id, thread_id, with_main, among)
    return PickedTurn.from_record(row) if row is not None else None


async def is_main(conn: asyncpg.Connection, user_id: str, thread_id: str) -> bool:
    """Is this thread of the user's its Main thread?"""
    return bool(await conn.fetchval(IS_MAIN, user_id, thread_id))


async def start_turn(conn: asyncpg.Connection, user_id: str, turn_id: int, runtime_id: str,
                     now: datetime, lease_until: datetime, delivered_through: int) -> TurnRow:
    """queued → running, for the turn ``pick_next`` locked in this transaction."""
    row = await conn.fetchrow(START_TURN, turn_id, runtime_id, lease_until, now,
                              delivered_through, user_id)
    assert row is not None, "pick_next locked a queued turn in this transaction"
    return TurnRow.from_record(row)


def _turn(record: asyncpg.Record | None) -> TurnRow | None:
    return TurnRow.from_record(record) if record is not None else None


async def lock_turn(conn: asyncpg.Connection, user_id: str,
                    turn_id: int) -> TurnRow | None:
    """One turn of the user's, locked for the rest of the transaction."""
    return _turn(await conn.fetchrow(LOCK_TURN, user_id, turn_id))


async def extend_lease(conn: asyncpg.Connection, user_id: str, turn_id: int,
                       lease_until: datetime) -> TurnRow | None:
    """Move a running turn's lease; None when the turn is not running."""
    return _turn(await conn.fetchrow(EXTEND_LEASE, user_id, turn_id, lease_until))


async def finish_turn(conn: asyncpg.Connection, user_id: str, turn_id: int,
                      now: datetime) -> TurnRow | None:
    """running → done; None when the turn is not running."""
    return _turn(await conn.fetchrow(FINISH_TURN, user_id, turn_id, now))


async def stop_turn(conn: asyncpg.Connection, user_id: str, thread_id: str,
                    now: datetime) -> TurnRow | None:
    """running → stopped for the thread's running turn; None when none is running."""
    return _turn(await conn.fetchrow(STOP_TURN, user_id, thread_id, now))


async def turn_status(conn: asyncpg.Connection, user_id: str, turn_id: int) -> str | None:
    """A turn's status (None: no such turn of the user's)."""
    value = await conn.fetchval(TURN_STATUS, user_id, turn_id)
    return str(value) if value is not None else None


async def set_delivered_through(conn: asyncpg.Connection, user_id: str, turn_id: int,
                                message_id: int) -> None:
    """Record that the turn's model has been handed the thread up to ``message_id``."""
    await conn.execute(SET_DELIVERED_THROUGH, user_id, turn_id, message_id)


async def lapse_expired(conn: asyncpg.Connection, now: datetime,
                        limit: int) -> list[LapsedTurn]:
    """Mark running turns whose lease ran out as lapsed and queue a fresh turn for each."""
    lapsed = [LapsedTurn.from_record(r) for r in await conn.fetch(LAPSE_EXPIRED, now, limit)]
    for turn in lapsed:
        await wake_thread(conn, turn.user_id, turn.thread_id)
    return lapsed


async def lapse_if_expired(conn: asyncpg.Connection, user_id: str, turn_id: int,
                           now: datetime) -> bool:
    """Lapse one turn whose lease ran out (and queue its successor); whether it lapsed."""
    turn = await conn.fetchrow(LAPSE_ONE, user_id, turn_id, now)
    if turn is None:
        return False
    await wake_thread(conn, user_id, turn["thread_id"])
    return True


async def current_running_turn(conn: asyncpg.Connection, user_id: str,
                               thread_id: str) -> int | None:
    """The fencing token: the id of the thread's running turn, or None.

    Call it inside the writing transaction and refuse the write (409 ``conflict``) unless it
    equals the ``turn_id`` the writer sent. The row is locked ``FOR SHARE`` until that
    transaction ends, so the turn cannot lapse, be re-claimed or finish in between.
    """
    value = await conn.fetchval(CURRENT_RUNNING_TURN, user_id, thread_id)
    return int(value) if value is not None else None


async def lock_thread(conn: asyncpg.Connection, user_id: str, thread_id: str) -> None:
    """Lock the thread row: every insert of a message or turn into it (their foreign keys take
    ``FOR KEY SHARE``) waits until this transaction ends, and vice versa."""
    await conn.execute(LOCK_THREAD, user_id, thread_id)


async def wake_for_forged(conn: asyncpg.Connection, user_id: str, thread_id: str) -> None:
    """Queue a turn (unless one is active) marked as queued for a forged notice alone."""
    await conn.execute(WAKE_FOR_FORGED, user_id, thread_id)


async def model_window(conn: asyncpg.Connection, user_id: str, thread_id: str,
                       before_id: int | None, max_rows: int,
                       max_bytes: int) -> list[MessageRow]:
    """The newest rows of a thread before ``before_id`` (None: up to the head) in id order: at
    most ``max_rows`` and about ``max_bytes`` (always at least one row). Call it inside a
    transaction (the plan setting is local to it)."""
    await conn.execute(WINDOW_PLAN)
    rows = await conn.fetch(MODEL_WINDOW, user_id, thread_id, before_id, max_rows, max_bytes)
    await conn.execute(WINDOW_PLAN_DONE)
    return [MessageRow.from_record(r) for r in rows]


async def has_before(conn: asyncpg.Connection, user_id: str, thread_id: str,
                     message_id: int) -> bool:
    """Whether the thread has rows older than ``message_id`` (for the window's cursor)."""
    return bool(await conn.fetchval(HAS_BEFORE, user_id, thread_id, message_id))


async def deliver_through(conn: asyncpg.Connection, user_id: str, thread_id: str,
                          message_id: int, now: datetime) -> int:
    """Stamp ``delivered_at`` on every undelivered input row up to ``message_id``; how many."""
    return int(await conn.fetchval(DELIVER_THROUGH, user_id, thread_id, message_id, now))


async def undelivered_rows(conn: asyncpg.Connection, user_id: str,
                           thread_id: str) -> list[MessageRow]:
    """The thread's inbox: input rows no model has been handed yet, in arrival order."""
    return [MessageRow.from_record(r)
            for r in await conn.fetch(UNDELIVERED_ROWS, user_id, thread_id)]


async def taken_back(conn: asyncpg.Connection, user_id: str, message_ids: list[int]) -> bool:
    """Whether any of the rows was taken back (``source_meta.retracted``)."""
    if not message_ids:
        return False
    return bool(await conn.fetchval(TAKEN_BACK, user_id, message_ids))


async def has_undelivered(conn: asyncpg.Connection, user_id: str, thread_id: str) -> bool:
    """Whether input is waiting in the thread's inbox."""
    return bool(await conn.fetchval(HAS_UNDELIVERED, user_id, thread_id))


async def mark_delivered(conn: asyncpg.Connection, user_id: str, message_ids: list[int],
                         now: datetime) -> None:
    """Stamp ``delivered_at`` on input rows just handed to a model."""
    if message_ids:
        await conn.execute(MARK_DELIVERED, user_id, message_ids, now)


async def forged_since(conn: asyncpg.Connection, user_id: str, thread_id: str,
                       after_id: int) -> list[MessageRow]:
    """Assistant rows flagged ``source_meta.guard = 'forged'`` after ``after_id``."""
    return [MessageRow.from_record(r)
            for r in await conn.fetch(FORGED_SINCE, user_id, thread_id, after_id)]


async def last_message_id(conn: asyncpg.Connection, user_id: str, thread_id: str) -> int:
    """The thread's highest message id (0 for an empty thread)."""
    return int(await conn.fetchval(LAST_MESSAGE_ID, user_id, thread_id))


async def stamp_seen(conn: asyncpg.Connection, user_id: str, component_ids: list[str],
                     now: datetime) -> list[str]:
    """Stamp ``seen_at`` on components whose answers a model was just handed (first time)."""
    if not component_ids:
        return []
    return [r["id"] for r in await conn.fetch(STAMP_SEEN, user_id, component_ids, now,
                                               rfc3339(now))]


async def lock_unseen_tool_rows(conn: asyncpg.Connection, user_id: str, thread_id: str) -> None:
    """Lock, in id order, the tool rows a delivery may mirror ``seen_at`` into."""
    await conn.execute(LOCK_UNSEEN_TOOL_ROWS, user_id, thread_id)


async def open_components(conn: asyncpg.Connection, user_id: str, thread_id: str) -> list[str]:
    """Ids of the thread's components that are not settled, oldest first."""
    return [r["id"] for r in await conn.fetch(OPEN_COMPONENTS, user_id, thread_id, UNSETTLED)]
