"""Presence for the due-time rule: a live client focusing a thread means Max is watching it."""

from __future__ import annotations

from datetime import timedelta

from maxclaw.auth.service import parse_uuid
from maxclaw.clock import Clock
from maxclaw.db.database import Database
from maxclaw.errors import NotFound
from maxclaw.presence import store
from maxclaw.timeline import store as timeline_store


class PresenceService:
    """Focus, refresh and leave; rows expire after ``ttl`` unless refreshed."""

    def __init__(self, db: Database, clock: Clock, ttl_s: float) -> None:
        self.db = db
        self.clock = clock
        self.ttl = timedelta(seconds=ttl_s)

    async def focus(self, connection_id: str, user_id: str, thread_id: str | None) -> None:
        """Set (or clear, with None) the thread this connection is showing."""
        if thread_id is not None:
            thread_id = parse_uuid(thread_id)
        async with self.db.transaction() as conn:
            if thread_id is not None and \
                    await timeline_store.get_thread(conn, user_id, thread_id) is None:
                raise NotFound("No such thread.")
            await store.focus(conn, connection_id, user_id, thread_id,
                              self.clock.now() + self.ttl)

    async def leave(self, connection_id: str, user_id: str) -> None:
        async with self.db.connection() as conn:
            await store.leave(conn, user_id, connection_id)

    async def is_watching(self, user_id: str, thread_id: str) -> bool:
        async with self.db.connection() as conn:
            return await store.is_watching(conn, user_id, thread_id, self.clock.now())

    async def purge_expired(self) -> int:
        """Drop rows whose TTL ran out (they count for nothing: ``is_watching`` and the
        re-judging sweep read only live rows); returns how many."""
        async with self.db.connection() as conn:
            return await store.purge_expired(conn, self.clock.now())
