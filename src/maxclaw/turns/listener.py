"""Wake long-polling claims when a turn is queued: the ``maxclaw_turn`` channel of the process's
LISTEN connection (``db.listen.Listener``), fanned out to the waiting claims of that user.

NOTIFY is a hint, never the source of truth (domain.md, "Scale"): a waiting claim also retries
on a short poll, so a lost notification, a dropped listener connection or a database restart
costs at most one poll interval, never a stranded turn; a lost or re-opened connection wakes
every waiting claim to look again at once. The connection is opened lazily by the first claim
that waits, so processes that never serve agents (``maxclaw user create``, tests that do not
claim) hold no extra connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

from maxclaw.db.listen import Listener

CHANNEL = "maxclaw_turn"


class TurnListener:
    """The ``maxclaw_turn`` subscription and the claims waiting on it."""

    name = "turn-listener"

    def __init__(self, listener: Listener) -> None:
        self.listener = listener
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self.notifications = 0  # how many NOTIFYs arrived (tests and metrics read it)
        listener.subscribe(CHANNEL, self._on_notify, on_reconnect=self.wake_all,
                           on_lost=self.wake_all)

    @property
    def listening(self) -> bool:
        return self.listener.listening

    async def ensure_listening(self) -> None:
        """Open the LISTEN connection unless it is open (or is being retried)."""
        await self.listener.ensure_listening()

    def _on_notify(self, payload: str) -> None:
        self.notifications += 1
        for event in self._waiters.get(payload, ()):
            event.set()

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
        """Waiting claims return now; the shared connection is closed by its own ``stop``."""
        self.wake_all()
