"""SQL for the change stream: the catch-up read (its hints arrive on ``CHANNEL`` through the
process's LISTEN connection, ``db.listen``).

One catch-up read is one ``REPEATABLE READ`` snapshot: first its horizon, essentially
``pg_snapshot_xmin(pg_current_snapshot())`` (every transaction of this database below it has
finished, so no row below it can still appear or change without getting a newer xid; see
``HORIZON``), then one query per table for
the rows strictly after the reader's position and below the horizon, in ``(xid, rev)`` order.
The ``*_user_sync`` indexes on ``(user_id, xid, rev)`` serve all three.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from maxclaw.db.listen import LISTENER_APP_NAME as LISTENER_APP_NAME  # tests find it by name
from maxclaw.realtime.cursor import Position
from maxclaw.timeline.rows import MessageRow, ThreadRow

CHANNEL = "maxclaw_rev"

# The horizon is pg_snapshot_xmin(pg_current_snapshot()) sharpened by one fact: xids are
# cluster-wide, but a transaction connected to another database can never write our tables.
# So an xid of the snapshot's running list is skipped when pg_stat_activity proves it belongs
# to a backend of another database (a backend's database never changes; running xids are
# unique, so matching their low 32 bits is exact). Anything unproven (a backend that just
# finished, a prepared transaction, a column hidden for lack of pg_read_all_stats) still holds
# the horizon back, which is the safe side. Without this, one long transaction in any other
# database of the cluster would stall every client of this one.
HORIZON = """
SELECT least(pg_snapshot_xmax(s.snap),
             (SELECT min(x) FROM pg_snapshot_xip(s.snap) AS x
               WHERE (x::text::bigint % 4294967296) NOT IN (
                     SELECT a.backend_xid::text::bigint FROM pg_stat_activity a
                      WHERE a.backend_xid IS NOT NULL AND a.datid IS NOT NULL
                        AND a.datid <> (SELECT oid FROM pg_database
                                         WHERE datname = current_database()))))::text
  FROM (SELECT pg_current_snapshot() AS snap) s
"""

# The newest position a cursor we handed out can name: a cursor past it comes from another
# database (or a restore) and is answered with ``resync``.
CURSOR_BOUNDS = """
SELECT pg_snapshot_xmax(pg_current_snapshot())::text AS xmax,
       (SELECT last_value FROM maxclaw_rev_seq) AS last_rev
"""

# Shared tail of the three reads. $1 users, $2/$3 the position after which to read, $4 the
# horizon (exclusive), $5 an optional thread filter (NULL: every thread), $6 the page size.
# ``xid`` is selected as text under another name: ORDER BY must sort the xid8 column itself.
_AFTER = """
   AND (t.xid, t.rev) > ($2::text::xid8, $3::bigint)
   AND t.xid < $4::text::xid8
"""

READ_THREADS = f"""
SELECT t.id::text, t.user_id::text, t.kind, t.category, t.title, t.turn_state, t.open_cards,
       cardinality(t.background_jobs) AS background_jobs, t.created_at,
       t.rev, t.archived_at, t.xid::text AS xid_text
  FROM threads t
 WHERE t.user_id = ANY($1::uuid[]) {_AFTER}
   AND ($5::uuid[] IS NULL OR t.id = ANY($5::uuid[]))
 ORDER BY t.xid, t.rev
 LIMIT $6
"""

# A sensitive row's body never leaves the database on this path (the projection would drop it
# anyway; not reading it means no frame, log or crash dump of this process can hold it).
READ_MESSAGES = f"""
SELECT t.id, t.user_id::text, t.thread_id::text, t.role,
       CASE WHEN t.sensitive THEN NULL ELSE t.body END AS body,
       t.content, t.tool_calls, t.tool_call_id, t.display, t.source_meta, t.sensitive,
       t.turn_id, t.delivered_at, t.created_at, t.rev, t.xid::text AS xid_text
  FROM messages t
 WHERE t.user_id = ANY($1::uuid[]) {_AFTER}
   AND ($5::uuid[] IS NULL OR t.thread_id = ANY($5::uuid[]))
 ORDER BY t.xid, t.rev
 LIMIT $6
"""

READ_DECISIONS = f"""
SELECT t.id, t.user_id::text, t.kind, t.status, t.component_id, t.thread_id::text, t.title,
       t.body, t.options, t.allow_text, t.sensitive, t.answer_text, t.settled_via, t.bar,
       t.bar_snoozed_until, t.created_at, t.settled_at, t.dismissed_at, t.rev,
       t.xid::text AS xid_text
  FROM decisions t
 WHERE t.user_id = ANY($1::uuid[]) {_AFTER}
   AND ($5::uuid[] IS NULL OR t.thread_id = ANY($5::uuid[]))
 ORDER BY t.xid, t.rev
 LIMIT $6
"""



def _budgeted(read: str) -> str:
    """A read cut by bytes as well as rows ($7): rows come while they fit in $7 bytes with
    the rows before them (in stream order), and the first row always comes. A row's size is
    its whole text (``t::text``), measured in the database on the page's rows only (the LIMIT
    applies first), so 1 MiB rows past the budget are never sent to us to be decoded on the
    event loop. ``size_``, ``total_`` (the running sum) and ``got_`` (the rows the LIMIT
    kept, so a cut by bytes is known) come back with each row."""
    sized = read.replace(" AS xid_text\n", " AS xid_text, octet_length(t::text) AS size_\n", 1)
    assert sized != read
    return f"""
SELECT * FROM (
    SELECT page.*, sum(page.size_) OVER (ORDER BY page.xid_text::xid8, page.rev
                                         ROWS UNBOUNDED PRECEDING) AS total_,
           count(*) OVER () AS got_
      FROM ({sized}) page) budgeted
 WHERE total_ <= $7 OR total_ = size_
"""


# Messages, the table whose rows can be 1 MiB each, are cut where the page's bytes run out in
# the index alone: ``messages_user_sync`` carries each row's stored size (``messages.size``),
# so finding the cut reads no row's text (an index-only scan per user, in stream order, that
# stops at the LIMIT: ``user_id = ANY(…)`` could not be read in order and sorted every row of
# the users; the heap is visited only for the visibility map's unset pages and a thread
# filter), and only the rows of the page are then read whole, by their position. Summing
# ``octet_length(t::text)`` instead read (and detoasted) every row up to the LIMIT to return
# the few that fit: on a 145 MB history a socket never reached ``synced``. Same columns,
# same bookkeeping as ``_budgeted``.
# Each row of the page is then read by its key in messages_user_sync (the inner LIMIT 1 keeps
# the planner from turning that into a join that could scan the table). No SQL comments inside
# the statement: logs and pg_stat_statements show it on one line, where "--" would end it.
READ_MESSAGES_CUT = f"""
SELECT t.id, t.user_id::text, t.thread_id::text, t.role,
       CASE WHEN t.sensitive THEN NULL ELSE t.body END AS body,
       t.content, t.tool_calls, t.tool_call_id, t.display, t.source_meta, t.sensitive,
       t.turn_id, t.delivered_at, t.created_at, t.rev, t.xid::text AS xid_text,
       t.size AS size_, cut.total_, cut.got_
  FROM (SELECT * FROM (
            SELECT page.*, sum(page.size) OVER (ORDER BY page.xid, page.rev
                                                ROWS UNBOUNDED PRECEDING) AS total_,
                   count(*) OVER () AS got_
              FROM (SELECT t.user_id, t.xid, t.rev, t.size
                      FROM unnest($1::uuid[]) AS u(id)
                     CROSS JOIN LATERAL (
                           SELECT t.user_id, t.xid, t.rev, t.size
                             FROM messages t
                            WHERE t.user_id = u.id {_AFTER}
                              AND ($5::uuid[] IS NULL OR t.thread_id = ANY($5::uuid[]))
                            ORDER BY t.xid, t.rev
                            LIMIT $6) t
                     ORDER BY t.xid, t.rev
                     LIMIT $6) page) budgeted
         WHERE total_ <= $7 OR total_ = size) cut
 CROSS JOIN LATERAL (SELECT * FROM messages m
                      WHERE m.user_id = cut.user_id AND m.xid = cut.xid AND m.rev = cut.rev
                      LIMIT 1) t
 ORDER BY t.xid, t.rev
"""

_READS = {"threads": _budgeted(READ_THREADS), "messages": READ_MESSAGES_CUT,
          "decisions": _budgeted(READ_DECISIONS)}
DEFAULT_MAX_BYTES = 1024 * 1024  # a read's byte budget (settings.realtime_batch_bytes)


@dataclass(frozen=True, slots=True)
class Change:
    """One row's latest committed state, at its position in the stream."""

    table: str
    position: Position
    user_id: str
    thread_id: str | None  # the thread it belongs to (a thread row: itself)
    row: ThreadRow | MessageRow | dict[str, Any]  # a decision: its columns by name
    size: int = 0  # the row's text in bytes (what the byte budget counts)


@dataclass(frozen=True, slots=True)
class Changes:
    """What one catch-up read found, and how far it got."""

    changes: list[Change]  # in position order
    end: Position  # every change in scope at or before ``end`` has been read
    complete: bool  # False when a page filled up: read again from ``end``


def _change(table: str, record: asyncpg.Record) -> Change:
    columns = dict(record)
    position = Position(int(columns.pop("xid_text")), int(columns["rev"]))
    size = int(columns.pop("size_"))
    del columns["total_"], columns["got_"]  # the budget's bookkeeping, not the row's
    thread_id = columns["id"] if table == "threads" else columns["thread_id"]
    row: ThreadRow | MessageRow | dict[str, Any] = (
        ThreadRow(**columns) if table == "threads"
        else MessageRow(**columns) if table == "messages" else columns)
    return Change(table, position, columns["user_id"], thread_id, row, size)


async def read_changes(conn: asyncpg.Connection, users: Sequence[str], after: Position, *,
                       threads: Sequence[str] | None = None, limit: int = 1000,
                       max_bytes: int = DEFAULT_MAX_BYTES) -> Changes:
    """The users' changes after ``after`` and below the snapshot's horizon, in order: at most
    ``limit`` rows per table and about ``max_bytes`` in all (always at least one change);
    ``complete`` is False when a cut left more to read from ``end``."""
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        horizon = int(await conn.fetchval(HORIZON))
        per_table = {
            table: await conn.fetch(sql, list(users), str(after.xid), after.rev, str(horizon),
                                    None if threads is None else list(threads), limit,
                                    max_bytes)
            for table, sql in _READS.items()
        }
    end = Position(horizon, 0)
    complete = True
    for rows in per_table.values():
        if not rows:
            continue
        last = max(rows, key=lambda r: (int(r["xid_text"]), int(r["rev"])))
        if last["got_"] >= limit or len(rows) < last["got_"]:
            # a page cut by rows or bytes: nothing past its last row is known to be read yet,
            # in any table
            complete = False
            end = min(end, Position(int(last["xid_text"]), int(last["rev"])))
    changes = [_change(table, r) for table, rows in per_table.items() for r in rows]
    changes = sorted((c for c in changes if c.position <= end), key=lambda c: c.position)
    # the tables together within the budget too (each was on its own)
    total = 0
    for i, change in enumerate(changes):
        if i and total + change.size > max_bytes:  # the first change always comes
            return Changes(changes[:i], changes[i - 1].position, False)
        total += change.size
    return Changes(changes, end, complete)


def next_limit(read: Changes, page_size: int) -> int:
    """The row limit for the read that continues ``read``: about twice what fitted in its
    budget, so a run of 1 MiB rows is not sized again 500 rows at a time (the database measures
    every row the LIMIT keeps), and back to ``page_size`` for small rows."""
    return max(4, min(page_size, 2 * len(read.changes)))


async def cursor_bounds(conn: asyncpg.Connection) -> Position:
    """The newest position any cursor from this database can name."""
    row = await conn.fetchrow(CURSOR_BOUNDS)
    return Position(int(row["xmax"]), int(row["last_rev"]))
