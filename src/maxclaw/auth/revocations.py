"""Every replica hears a revoke at once: ``LISTEN maxclaw_token_revoked``.

A revoke deletes the token row and NOTIFYs its id in the same transaction. Each process's
listener drops the token from its auth cache and closes the WebSockets it authenticated. The
cache is only used while this listener is connected: a process that cannot hear revokes reads
every token from the database, and a lost connection clears the cache (revokes sent meanwhile
are unheard). The connection opens lazily, with the first authentication.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import asyncpg

from maxclaw.db.database import CONNECTION_ERRORS, connect

log = logging.getLogger("maxclaw.auth.revocations")
CHANNEL = "maxclaw_token_revoked"
RETRY_CONNECT_S = 5.0


class RevocationListener:
    name = "token-revocations"

    def __init__(self, database_url: str, on_revoked: Callable[[int], None],
                 on_lost: Callable[[], None]) -> None:
        self.database_url = database_url
        self.on_revoked = on_revoked
        self.on_lost = on_lost
        self._conn: asyncpg.Connection | None = None
        self._lock = asyncio.Lock()
        self._next_try = 0.0
        self._stopped = False

    @property
    def listening(self) -> bool:
        return self._conn is not None and not self._conn.is_closed()

    async def ensure_listening(self) -> bool:
        """Open the LISTEN connection unless it is open (or failed moments ago)."""
        if self.listening:
            return True
        async with self._lock:
            loop = asyncio.get_running_loop()
            if self.listening or self._stopped or loop.time() < self._next_try:
                return self.listening
            try:
                conn = await connect(self.database_url)
                await conn.add_listener(CHANNEL, self._on_notify)
                conn.add_termination_listener(self._on_terminated)
            except (*CONNECTION_ERRORS, asyncpg.PostgresError) as exc:
                self._next_try = loop.time() + RETRY_CONNECT_S
                log.warning("revocation listener cannot connect; tokens are not cached",
                            extra={"error": type(exc).__name__})
                return False
            self._conn = conn
            return True

    def _on_notify(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        try:
            token_id = int(payload)
        except ValueError:
            return
        self.on_revoked(token_id)

    def _on_terminated(self, _conn: Any) -> None:
        self._conn = None
        self.on_lost()

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        self._stopped = True
        conn, self._conn = self._conn, None
        if conn is not None and not conn.is_closed():
            try:
                await conn.close(timeout=2)
            except (*CONNECTION_ERRORS, asyncpg.PostgresError, TimeoutError):
                conn.terminate()
