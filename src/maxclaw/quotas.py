"""In-process quotas: open sockets per user, concurrent claims per token, refused tokens per
client address and push deliveries per user. Each is counted by the replica that serves the
request (docs/security.md says so); a quota used up raises ``RateLimited`` (429)."""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

from maxclaw.errors import RateLimited, Unauthorized
from maxclaw.settings import Settings

WINDOW_S = 60.0
# a socket or claim slot frees when one closes; clients are told to try again after this
SLOT_RETRY_S = 5.0
T = TypeVar("T")


class _Window:
    """Events per key in the last ``WINDOW_S`` seconds (a sliding log, trimmed as it is read)."""

    def __init__(self, limit: int, now: Callable[[], float]) -> None:
        self.limit = limit
        self.now = now
        self.events: dict[str, deque[float]] = {}

    def _trim(self, key: str) -> deque[float] | None:
        events = self.events.get(key)
        if events is None:
            return None
        cutoff = self.now() - WINDOW_S
        while events and events[0] <= cutoff:
            events.popleft()
        if not events:
            del self.events[key]
            return None
        return events

    def wait_s(self, key: str) -> float:
        """0 when another event fits in the window, else seconds until one does."""
        events = self._trim(key)
        if events is None or len(events) < self.limit:
            return 0.0
        return events[-self.limit] + WINDOW_S - self.now()

    def add(self, key: str) -> None:
        self._trim(key)
        self.events.setdefault(key, deque()).append(self.now())
        if len(self.events) > 100_000:  # many addresses: drop the ones whose window is over
            for stale in list(self.events)[:50_000]:
                self._trim(stale)


class Quotas:
    """The replica's counters; one instance per process (``Services.quotas``)."""

    def __init__(self, settings: Settings, now: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self.sockets: dict[object, int] = {}
        self.claims: dict[object, int] = {}
        self.failed_auth = _Window(settings.quota_failed_auth_per_minute, now)
        self.pushes = _Window(settings.quota_pushes_per_user_per_minute, now)

    # -- refused tokens per client address ---------------------------------------------------

    def check_auth(self, address: str | None) -> None:
        """Refuse an address that sent too many bad tokens in the last minute."""
        wait = self.failed_auth.wait_s(address or "?")
        if wait > 0:
            raise RateLimited("Too many refused tokens from this address; wait and retry.",
                              retry_after_s=wait, limit=self.failed_auth.limit)

    def auth_failed(self, address: str | None) -> None:
        self.failed_auth.add(address or "?")

    async def authenticating(self, address: str | None,
                             attempt: Callable[[], Awaitable[T]]) -> T:
        """``attempt()``'s result; its refusal (``Unauthorized``) is counted against
        ``address``, and an address that used up its refusals is answered 429 instead. A
        valid token is never refused here: behind a proxy (or a NAT) one address is many
        clients, and a prober must not lock them all out. Guesses from a locked-out address
        still cost one token lookup each (an indexed read, or none when cached)."""
        try:
            return await attempt()
        except Unauthorized:
            self.check_auth(address)
            self.auth_failed(address)
            raise

    # -- concurrent slots ---------------------------------------------------------------------

    @contextlib.contextmanager
    def socket(self, user_id: str) -> Iterator[None]:
        """Hold one of the user's WebSocket slots while the socket is open."""
        with self._slot(self.sockets, user_id, self.settings.quota_sockets_per_user,
                        "Too many open WebSockets for this user; close one and retry."):
            yield

    @contextlib.contextmanager
    def claim(self, token: int | str) -> Iterator[None]:
        """Hold one of the agent token's claim slots while its claim waits."""
        with self._slot(self.claims, token, self.settings.quota_claims_per_token,
                        "Too many concurrent claims for this agent token; wait for one to end."):
            yield

    @staticmethod
    @contextlib.contextmanager
    def _slot(table: dict[object, int], key: object, limit: int,
              message: str) -> Iterator[None]:
        if table.get(key, 0) >= limit:
            raise RateLimited(message, retry_after_s=SLOT_RETRY_S, limit=limit)
        table[key] = table.get(key, 0) + 1
        try:
            yield
        finally:
            left = table[key] - 1
            if left:
                table[key] = left
            else:
                del table[key]

    # -- push deliveries per user -------------------------------------------------------------

    def push_wait_s(self, user_id: str) -> float:
        """0 and counted when a delivery for the user may go now, else seconds to wait."""
        wait = self.pushes.wait_s(user_id)
        if wait <= 0:
            self.pushes.add(user_id)
        return wait
