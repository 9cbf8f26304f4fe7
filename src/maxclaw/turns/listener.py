"""Wake long-polling claims when a turn is queued: one ``LISTEN maxclaw_turn`` connection per
process, fanned out to the waiting claims of that user.

NOTIFY is a hint, never the source of truth (domain.md, "Scale"): a waiting claim also retries
on a short poll, so a lost notification, a dropped listener connection or a database restart
costs at most one poll interval, never a stranded turn. The connection is opened lazily by the
first claim that waits, so processes that never serve agents (``maxclaw user create``, tests
that do not claim) hold no extra connection.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import asyncpg

from maxclaw.db.database import CONNECTION_ERRORS, connect

log = logging.getLogger("maxclaw.turns.listener")
CHANNEL = "maxclaw_turn"
RETRY_CONNECT_S = 5.0


class TurnListener:
    """The process's ``LISTEN maxclaw_turn`` connection and the claims waiting on it."""

    name = "turn-listener"

    def __init__(self, database_url: str) -> None:
        self.database_url = database_url
        self._conn: asyncpg.Connection | None = None
        self._lock = asyncio.Lock()
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self._next_try = 0.0
        self.notifications = 0  # how many NOTIFYs arrived (tests and metrics read it)

    @property
    def listening(self) -> bool:
        return self._conn is not None and not self._conn.is_closed()

    async def ensure_listening(self) -> None:
        """Open the LISTEN connection unless it is open (or failed moments ago)."""
        if self.listening:
            return
        async with self._lock:
            loop = asyncio.get_running_loop()
            if self.listening or loop.time() < self._next_try:
                return
            try:
                conn = await connect(self.database_url)
                await conn.add_listener(CHANNEL, self._on_notify)
                conn.add_termination_listener(self._on_terminated)
            except (*CONNECTION_ERRORS, asyncpg.PostgresError) as exc:
                self._next_try = loop.time() + RETRY_CONNECT_S
                log.warning("turn listener cannot connect; claims fall back to polling",
                            extra={"error": type(exc).__name__})
                return
            self._conn = conn

    def _on_notify(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        self.notifications += 1
        for event in self._waiters.get(payload, ()):
            event.set()

    def _on_terminated(self, _conn: Any) -> None:
        self._conn = None
        self.wake_all()  # waiting claims retry at once (and reconnect)

    def wake_all(self) -> None:
        for events in self._waiters.values():
            for event in events:
                event.set()

    @contextmanager
    def waiter(self, user_id: str) -> Iterator[asyncio.Event]:
        """An event set whenever a turn of ``user_id`` is queued, while the block runs."""
        event = asyncio.Event()
        self._waiters.setdefault(user_id, set()).add(event)
        try:
            yield event
        finally:
            events = self._waiters.get(user_id)
            if events is not None:
                events.discard(event)
                if not events:
                    del self._waiters[user_id]

    async def start(self) -> None:
        """Nothing to do up front: the connection opens with the first waiting claim."""

    async def stop(self) -> None:
        conn, self._conn = self._conn, None
        self.wake_all()
        if conn is not None and not conn.is_closed():
            try:
                await conn.close(timeout=2)
            except (*CONNECTION_ERRORS, asyncpg.PostgresError):
                conn.terminate()
