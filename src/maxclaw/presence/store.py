"""SQL for presence rows. A row lives while its connection refreshes it; ``expires_at`` is the
TTL, so a crashed replica's rows lapse by themselves."""

from __future__ import annotations

from datetime import datetime

import asyncpg

UPSERT = """
INSERT INTO presence (connection_id, user_id, thread_id, expires_at)
VALUES ($1, $2::uuid, $3::uuid, $4)
ON CONFLICT (user_id, connection_id) DO UPDATE SET thread_id = EXCLUDED.thread_id,
                                                   expires_at = EXCLUDED.expires_at
"""
DELETE = "DELETE FROM presence WHERE user_id = $1::uuid AND connection_id = $2"
IS_WATCHING = """
SELECT EXISTS (SELECT 1 FROM presence
                WHERE user_id = $1::uuid AND thread_id = $2::uuid AND expires_at > $3)
"""
PURGE = "DELETE FROM presence WHERE expires_at <= $1"


async def focus(conn: asyncpg.Connection, connection_id: str, user_id: str,
                thread_id: str | None, expires_at: datetime) -> None:
    """Record (or refresh) which thread a connection has in focus (None: none)."""
    await conn.execute(UPSERT, connection_id, user_id, thread_id, expires_at)


async def leave(conn: asyncpg.Connection, user_id: str, connection_id: str) -> None:
    """The connection closed: its presence ends at once (found by its key: the user's)."""
    await conn.execute(DELETE, user_id, connection_id)


async def is_watching(conn: asyncpg.Connection, user_id: str, thread_id: str,
                      now: datetime) -> bool:
    """Whether a live client of the user has this thread in focus."""
    return bool(await conn.fetchval(IS_WATCHING, user_id, thread_id, now))


async def purge_expired(conn: asyncpg.Connection, now: datetime) -> int:
    """Drop lapsed rows; returns how many."""
    result = await conn.execute(PURGE, now)
    return int(result.split()[-1])
