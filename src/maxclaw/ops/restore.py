"""``maxclaw restore-finish``: make a database restored from a logical backup (``pg_dump``)
safe for clients that still hold cursors from before the restore.

A restore loses the writes made after the backup, and a client may hold them: its cursor
names positions (``xid``, ``rev``) the restored database never reached. Unfinished, two
things go wrong: new writes take revs the client already holds for lost writes (so it ignores
them: a silent gap), and in a new cluster the rows keep the old cluster's ``xid`` values, which
lie above the new cluster's horizon (so even a fresh snapshot leaves them out until the new
cluster's xids pass them).

The fix, in one transaction with the rev triggers held off: every synced row is stamped with
this transaction's xid and its rev moved up by ``REV_GAP`` (order kept), and the rev sequence
jumps by the same gap. Afterwards every position a client could hold lies below every row
(same cluster: the client is sent every row again, at revs above the ones it holds, which is a
full snapshot), or beyond the database's bounds (new cluster: ``resync``, then a snapshot).
Then the database is analysed, so the first requests and sweeps are planned on its real sizes.
"""

from __future__ import annotations

from maxclaw.db.database import connect
from maxclaw.db.search_sql import SYNCED_TABLES

# more revs than any deployment hands out between a backup and its restore
REV_GAP = 10**12


async def finish_restore(database_url: str) -> dict[str, int]:
    """Restamp the synced tables (see the module doc); returns rows per table."""
    conn = await connect(database_url)
    try:
        async with conn.transaction():
            last = int(await conn.fetchval(
                "SELECT last_value FROM maxclaw_rev_seq"))
            await conn.execute("SELECT setval('maxclaw_rev_seq', $1)", last + REV_GAP)
            counts: dict[str, int] = {}
            for table in SYNCED_TABLES:
                await conn.execute(f"ALTER TABLE {table} DISABLE TRIGGER {table}_stamp_rev")
                status = await conn.execute(
                    f"UPDATE {table} SET rev = rev + $1, xid = pg_current_xact_id()", REV_GAP)
                await conn.execute(f"ALTER TABLE {table} ENABLE TRIGGER {table}_stamp_rev")
                counts[table] = int(status.split()[-1])
        # pg_dump carries no planner statistics (before PostgreSQL 18), and until
        # autovacuum's first analyse a freshly restored table is planned as if nearly empty:
        # the sweep's hand-off excerpt then read a whole thread per card (seconds a batch,
        # past the command timeout). The restamp above also left a dead version of each row.
        await conn.execute("ANALYZE")
        return counts
    finally:
        await conn.close()
