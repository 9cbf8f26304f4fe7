"""Count the statements a service call sends to PostgreSQL (each one is a network round trip).

``installed()`` wraps ``maxclaw.db.database._init_connection`` so pooled connections opened
meanwhile report their queries to a ``StatementLog`` while it is recording. asyncpg calls query
loggers with ``call_soon``; ``drain()`` lets them run before a count is read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import asyncpg

import maxclaw.db.database as database

POOL_RESET = "SELECT pg_advisory_unlock_all()"  # asyncpg's reset on every pool release


class StatementLog:
    def __init__(self) -> None:
        self.recording = False
        self.queries: list[str] = []
        self.args: list[tuple[Any, ...]] = []  # each query's arguments, for EXPLAIN

    def __call__(self, record: Any) -> None:
        if self.recording:
            self.queries.append(" ".join(str(record.query).split()))
            self.args.append(tuple(record.args or ()))

    @contextmanager
    def record(self) -> Iterator[list[str]]:
        self.queries = []
        self.args = []
        self.recording = True
        try:
            yield self.queries
        finally:
            self.recording = False

    @staticmethod
    def is_sql(query: str) -> bool:
        """Not a transaction bracket and not the pool's reset."""
        return not (query.startswith(POOL_RESET) or _is_bracket(query))

    @staticmethod
    def kinds(queries: list[str]) -> dict[str, int]:
        """Split a log into SQL statements, BEGIN/COMMIT and pool resets."""
        out = {"sql": 0, "begin_commit": 0, "pool_reset": 0}
        for q in queries:
            if q.startswith(POOL_RESET):
                out["pool_reset"] += 1
            elif _is_bracket(q):
                out["begin_commit"] += 1
            else:
                out["sql"] += 1
        return out


# asyncpg's own statements on a connection's first use of a type (not the service's SQL)
INTROSPECTION = ("SELECT current_setting('jit')", "WITH RECURSIVE typeinfo_tree",
                 "SELECT set_config('jit'")


def commits(queries: list[str]) -> int:
    """The transactions ``queries`` committed, as ``pg_stat_database.xact_commit`` counts them:
    a BEGIN … COMMIT block is one, and so is each statement outside a block (autocommit); the
    pool's reset and asyncpg's type introspection are left out."""
    count, inside = 0, False
    for query in queries:
        upper = query.upper()
        if upper.startswith("BEGIN"):
            inside, count = True, count + 1
        elif upper.startswith(("COMMIT", "ROLLBACK")):
            inside = False
        elif not inside and StatementLog.is_sql(query) and not query.startswith(INTROSPECTION):
            count += 1
    return count


def _is_bracket(query: str) -> bool:
    return query.upper().startswith(("BEGIN", "COMMIT", "ROLLBACK"))


@contextmanager
def installed() -> Iterator[StatementLog]:
    """While active, every connection opened reports its queries to one ``StatementLog``.

    Open the pool inside the block; connections keep logging after it ends, so close the pool
    too (a logger costs a little per query, which the timed runs must not pay)."""
    log = StatementLog()
    original: Callable[[asyncpg.Connection], Awaitable[None]] = database._init_connection

    async def init(conn: asyncpg.Connection) -> None:
        await original(conn)
        conn.add_query_logger(log)

    database._init_connection = init
    try:
        yield log
    finally:
        database._init_connection = original  # type: ignore[assignment]


async def drain() -> None:
    """Let asyncpg's pending ``call_soon`` logger callbacks run (one loop iteration)."""
    await asyncio.sleep(0)
