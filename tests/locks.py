"""Holding a production statement at a chosen point, so a lock-order race plays out the same
way every run.

``hold_after`` installs an AFTER ROW trigger that waits on an advisory lock the test holds.
Triggers fire in name order and ``A_…`` sorts before ``RI_ConstraintTrigger_…``, so the
statement stops after its own writes and before its foreign-key checks take their locks.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from maxclaw.db.database import Database, connect
from tests import pooler

WAITERS = ("SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
           "WHERE NOT l.granted AND a.datname = current_database()")


@contextlib.asynccontextmanager
async def hold_after(database_url: str, table: str, event: str, when: str,
                     key: int) -> AsyncIterator[None]:
    """While inside, rows written to ``table`` by ``event`` (INSERT/UPDATE) that match the
    SQL condition ``when`` (on NEW) wait in their trigger until the block exits."""
    # a session lock: held on a direct connection even when the test runs through PgBouncer
    holder = await connect(pooler.DIRECT.get(database_url, database_url))
    name = f"A_hold_{key}"
    try:
        await holder.execute(f"""
            CREATE FUNCTION test_hold_{key}() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN PERFORM pg_advisory_xact_lock({key}); RETURN NULL; END $$;
            CREATE TRIGGER "{name}" AFTER {event} ON {table} FOR EACH ROW
              WHEN ({when}) EXECUTE FUNCTION test_hold_{key}();""")
        await holder.execute("SELECT pg_advisory_lock($1)", key)
        yield
    finally:
        await holder.execute("SELECT pg_advisory_unlock_all()")
        await holder.close()


async def wait_for_lock_waiters(db: Database, n: int = 1) -> None:
    """Until ``n`` backends of this test's database wait on a lock."""
    while True:
        async with db.connection() as conn:
            if await conn.fetchval(WAITERS) >= n:
                return
        await asyncio.sleep(0.01)


async def until_done_or_waiting(db: Database, task: asyncio.Task[object], n: int) -> None:
    """Until ``task`` has finished or ``n`` backends wait on a lock (the task is one of them)."""
    waiting = asyncio.create_task(wait_for_lock_waiters(db, n))
    try:
        await asyncio.wait({task, waiting}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiting.cancel()
