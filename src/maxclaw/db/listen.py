"""One ``LISTEN`` connection per process, multiplexing every channel, with one reconnect policy.

Subscribers (token revocations, the turn wake-ups, the realtime hub, the push dispatcher)
register a channel, a callback for its payloads and, optionally, what to do when the connection
is lost and when it is (re)established. NOTIFY is only a hint: a notification sent while the
connection is down is never delivered, so every (re)connect calls each subscriber's
``on_reconnect`` once its channel is LISTENed again, and the subscriber re-reads what it may
have missed (the hub catches every socket up, the dispatcher claims, revocations empty the
token cache, waiting claims look again).

The policy: connect, LISTEN on every channel, wait for the connection to end; then tell every
``on_lost``, and retry after a backoff that doubles from ``RETRY_FIRST_S`` to ``RETRY_MAX_S``
(reset by a successful connect). The connection goes to ``Database.listen_url``: a LISTEN needs
a real session, so behind PgBouncer in transaction mode it is the direct URL
(``MAXCLAW_LISTEN_DATABASE_URL``). It is named ``LISTENER_APP_NAME`` in ``pg_stat_activity`` so
operators (and the tests that kill it) find it.

The connection opens with the first subscriber that needs it (``open`` from a job's start,
``ensure_listening`` from a request path), so a command that never waits on a channel holds no
extra connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import asyncpg

from maxclaw.db.database import CONNECTION_ERRORS
from maxclaw.db.urls import plain_url

log = logging.getLogger("maxclaw.db.listen")

LISTENER_APP_NAME = "maxclaw-listener"
RETRY_FIRST_S = 0.1
RETRY_MAX_S = 5.0
# how long ``ensure_listening`` waits for the first connect before answering "not yet"
FIRST_CONNECT_WAIT_S = 5.0
_DOWN = (*CONNECTION_ERRORS, asyncpg.PostgresError)


@dataclass(frozen=True, eq=False)
class Subscription:
    """One subscriber of one channel. Callbacks run on the event loop and must not block."""

    channel: str
    on_notify: Callable[[str], None]
    on_reconnect: Callable[[], None] | None = None
    on_lost: Callable[[], None] | None = None


class Listener:
    """The process's LISTEN connection (a ``Job``: ``stop`` closes it)."""

    name = "listener"

    def __init__(self, url: str, *, retry_first_s: float = RETRY_FIRST_S,
                 retry_max_s: float = RETRY_MAX_S) -> None:
        self.url = url
        self.retry_first_s = retry_first_s
        self.retry_max_s = retry_max_s
        self.connects = 0  # connections opened so far (the first one included)
        self._subs: list[Subscription] = []
        self._conn: asyncpg.Connection | None = None
        self._task: asyncio.Task[None] | None = None
        self._attempted = asyncio.Event()  # set after the first connect attempt, won or lost
        self._lock = asyncio.Lock()  # a LISTEN on a new channel never races the connect
        self._stopped = False
        self._late: set[asyncio.Task[None]] = set()  # LISTENs of late subscribers, in flight

    @property
    def listening(self) -> bool:
        return self._conn is not None and not self._conn.is_closed()

    def subscribe(self, channel: str, on_notify: Callable[[str], None], *,
                  on_reconnect: Callable[[], None] | None = None,
                  on_lost: Callable[[], None] | None = None) -> Subscription:
        """Deliver ``channel``'s payloads to ``on_notify`` from now on. When the connection is
        already open the channel is LISTENed in the background and ``on_reconnect`` follows
        (what was sent before that was unheard), else the next connect does both."""
        sub = Subscription(channel, on_notify, on_reconnect, on_lost)
        self._subs.append(sub)
        if self.listening:
            task = asyncio.get_running_loop().create_task(self._listen_late(sub))
            self._late.add(task)
            task.add_done_callback(self._late.discard)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        """Stop delivering to ``sub`` (idempotent); the channel stays LISTENed until the
        connection closes, its notifications then reach nobody."""
        with contextlib.suppress(ValueError):
            self._subs.remove(sub)

    def open(self) -> None:
        """Start connecting (and reconnecting) in the background; idempotent."""
        if self._task is None and not self._stopped:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="listener")

    async def ensure_listening(self) -> bool:
        """Whether the connection is up, opening it first if nobody has yet. Only calls made
        before the first connect attempt ends wait for it; later ones answer at once, while
        the background task retries."""
        if self.listening:
            return True
        if self._stopped:
            return False  # shutting down: nothing will be heard again
        self.open()
        if not self._attempted.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._attempted.wait(), FIRST_CONNECT_WAIT_S)
        return self.listening

    async def channels(self) -> set[str]:
        """The channels the server says this connection LISTENs on (empty when it is down)."""
        async with self._lock:
            conn = self._conn
            if conn is None or conn.is_closed():
                return set()
            try:
                return {r[0] for r in await conn.fetch("SELECT pg_listening_channels()")}
            except _DOWN:
                return set()

    async def start(self) -> None:
        """Nothing up front: the first subscriber that needs the connection opens it."""

    async def stop(self) -> None:
        self._stopped = True
        tasks = [*self._late, *([self._task] if self._task is not None else [])]
        self._task = None
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._close()

    # -- the connection ----------------------------------------------------------------

    async def _run(self) -> None:
        delay = self.retry_first_s
        while not self._stopped:
            lost = asyncio.Event()
            try:
                await self._connect(lost)
            except Exception as exc:  # down, refused, or a bug: the same backoff either way
                self._attempted.set()
                log.warning("listener cannot connect; retrying",
                            extra={"error": type(exc).__name__, "retry_s": delay},
                            exc_info=not isinstance(exc, _DOWN))
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.retry_max_s)
                continue
            self._attempted.set()
            delay = self.retry_first_s
            self._tell("on_reconnect")
            await self._wait_lost(lost)
            log.warning("listener connection lost; reconnecting")
            await self._close()
            self._lost(lost)  # a no-op when the termination callback told them already

    async def _connect(self, lost: asyncio.Event) -> None:
        async with self._lock:
            conn = await asyncpg.connect(
                plain_url(self.url), statement_cache_size=0,
                server_settings={"application_name": LISTENER_APP_NAME})
            try:
                conn.add_termination_listener(lambda _conn: self._lost(lost))
                done: set[str] = set()
                # until none is left: a subscriber may come while a LISTEN is awaited, and it
                # sees no open connection to LISTEN on by itself yet
                while todo := {sub.channel for sub in self._subs} - done:
                    for channel in todo:
                        await conn.add_listener(channel, self._dispatch)
                        done.add(channel)
            except BaseException:
                conn.terminate()
                raise
            self._conn = conn
            self.connects += 1

    def _lost(self, lost: asyncio.Event) -> None:
        """Tell every subscriber, once per connection, as soon as asyncpg reports it gone (a
        token cache must stop being trusted before the next request, not after the reconnect
        task wakes)."""
        if not lost.is_set():
            lost.set()
            self._tell("on_lost")

    async def _wait_lost(self, lost: asyncio.Event) -> None:
        # the termination callback covers a backend that goes away; the poll covers a socket
        # asyncpg only finds closed (no callback) after the fact
        while not lost.is_set() and self.listening:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(lost.wait(), 5.0)

    async def _listen_late(self, sub: Subscription) -> None:
        async with self._lock:
            conn = self._conn
            if conn is None or conn.is_closed() or sub not in self._subs:
                return  # the next connect LISTENs on it (and tells it)
            try:
                await conn.add_listener(sub.channel, self._dispatch)
            except _DOWN:
                conn.terminate()  # the reconnect LISTENs on every channel
                return
        if sub.on_reconnect is not None:
            self._call(sub.on_reconnect)

    async def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None or conn.is_closed():
            return
        try:
            await conn.close(timeout=2)
        except (*_DOWN, TimeoutError):
            conn.terminate()

    def _dispatch(self, _conn: Any, _pid: int, channel: str, payload: str) -> None:
        for sub in list(self._subs):
            if sub.channel == channel:
                self._call(sub.on_notify, payload)

    def _tell(self, hook: str) -> None:
        for sub in list(self._subs):
            callback = getattr(sub, hook)
            if callback is not None:
                self._call(callback)

    @staticmethod
    def _call(callback: Callable[..., None], *args: str) -> None:
        # one subscriber's bug must not keep the others from hearing
        try:
            callback(*args)
        except Exception:
            log.exception("listener subscriber failed")
