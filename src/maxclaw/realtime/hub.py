"""The per-process fan-out: one LISTEN connection, one catch-up reader, many local sockets.

``NOTIFY`` is only a hint. The source of truth is the catch-up read (``store.read_changes``):
on a hint for a user with a local socket, on every tick (``realtime_poll_s``) and after the
listener reconnects, the pump runs one read per table for every user with a local socket, from
the oldest position any of them is covered to, and offers each change to the sockets whose scope
holds it. Each subscription records how far it is covered, so a socket that joins while a read
is in flight is simply read for in the next batch: no gap, whatever the timing.

A socket whose send queue is still over its bound when new changes arrive is detached and told
to close (``on_overflow``); it resumes from the last cursor it received. Several replicas each
run their own hub on the same database and see the same stream, so they behave as one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import asyncpg
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from maxclaw.db.database import Database
from maxclaw.errors import Unavailable
from maxclaw.realtime import frames, store
from maxclaw.realtime.cursor import Position
from maxclaw.realtime.sendqueue import SendQueue
from maxclaw.realtime.store import Change, Changes

log = logging.getLogger("maxclaw.realtime")

DEFAULT_PAGE_SIZE = 1000  # rows per table per live read
DEFAULT_CATCH_UP_PAGE_SIZE = 500  # rows per table per page of a subscription's catch-up
DEFAULT_QUEUE_MAX_CHARS = 4 * 1024 * 1024
MAX_BACKOFF_S = 5.0
# Errors that mean "the database is not reachable right now": retry on the next tick.
_DB_DOWN = (Unavailable, OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError)


@dataclass(eq=False)
class Subscription:
    """One socket's live scope: its user, an optional thread filter, and how far it is covered."""

    user_id: str
    threads: frozenset[str] | None
    covered: Position  # every change in scope up to here is queued (or was sent in catch-up)
    queue: SendQueue
    on_overflow: Callable[[], None]
    active: bool = field(default=True)

    def wants(self, change: Change) -> bool:
        """A thread filter keeps those threads, their messages and decisions about them."""
        return self.threads is None or change.thread_id in self.threads


class HubMetrics:
    """The hub's counters, on the app's registry."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        self.frames = Counter("maxclaw_realtime_frames_total", "record.upsert frames queued",
                              ["phase"], registry=registry)
        self.batches = Histogram("maxclaw_realtime_batch_seconds", "Live catch-up batches",
                                 registry=registry,
                                 buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1))
        self.hints = Counter("maxclaw_realtime_hints_total", "NOTIFY hints received",
                             registry=registry)
        self.slow_closes = Counter("maxclaw_realtime_slow_closes_total",
                                   "Sockets closed for falling behind", registry=registry)
        self.listener_connects = Counter("maxclaw_realtime_listener_connects_total",
                                         "LISTEN connections opened", registry=registry)
        self.subscriptions = Gauge("maxclaw_realtime_subscriptions",
                                   "Live subscriptions on this process", registry=registry)


class RealtimeHub:
    """Fans committed changes out to this process's WebSocket subscriptions (a ``Job``)."""

    name = "realtime"

    def __init__(self, db: Database, *, poll_s: float, registry: CollectorRegistry | None = None,
                 page_size: int = DEFAULT_PAGE_SIZE,
                 catch_up_page_size: int = DEFAULT_CATCH_UP_PAGE_SIZE,
                 queue_max_chars: int = DEFAULT_QUEUE_MAX_CHARS) -> None:
        self.db = db
        self.poll_s = poll_s
        self.page_size = page_size
        self.catch_up_page_size = catch_up_page_size
        self.queue_max_chars = queue_max_chars
        self.replica = uuid.uuid4().hex[:8]
        self.metrics = HubMetrics(registry)
        self.running = False
        self.listener_connects = 0
        self._subs: dict[str, set[Subscription]] = {}
        self._wake = asyncio.Event()
        self._started = 0
        self._finished = 0
        self._done = asyncio.Condition()
        self._tasks: list[asyncio.Task[None]] = []
        self._listener: asyncpg.Connection | None = None

    # -- Job -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the LISTEN connection and start the pump."""
        self.running = True
        self._tasks = [asyncio.create_task(self._pump(), name="realtime-pump"),
                       asyncio.create_task(self._listen(), name="realtime-listener")]

    async def stop(self) -> None:
        """Stop reading and listening; sockets are closed by the server's shutdown."""
        self.running = False
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        for subs in self._subs.values():
            for sub in subs:
                sub.active = False
        self._subs.clear()
        self.metrics.subscriptions.set(0)

    # -- subscriptions ------------------------------------------------------------------

    def attach(self, sub: Subscription) -> None:
        """Start offering live changes to ``sub`` from its ``covered`` position."""
        self._subs.setdefault(sub.user_id, set()).add(sub)
        self.metrics.subscriptions.inc()
        self.wake()  # read for it now rather than at the next tick

    def detach(self, sub: Subscription) -> None:
        """Stop offering changes to ``sub`` (idempotent)."""
        sub.active = False
        subs = self._subs.get(sub.user_id)
        if subs is not None and sub in subs:
            subs.discard(sub)
            self.metrics.subscriptions.dec()
            if not subs:
                del self._subs[sub.user_id]

    @property
    def subscription_count(self) -> int:
        return sum(len(s) for s in self._subs.values())

    def wake(self) -> None:
        """Run a batch as soon as the pump is free."""
        self._wake.set()

    async def sync(self) -> None:
        """Return once a batch that started after this call has run (or failed)."""
        if not self.running:
            await self._run_batches()
            return
        target = self._started + 1
        self.wake()
        async with self._done:
            await self._done.wait_for(lambda: self._finished >= target)

    # -- the pump -----------------------------------------------------------------------

    async def _pump(self) -> None:
        failures = 0
        while True:
            delay = self.poll_s if not failures else min(self.poll_s * 2 ** failures, MAX_BACKOFF_S)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)
            self._wake.clear()
            self._started += 1
            try:
                await self._run_batches()
                failures = 0
            except _DB_DOWN as exc:
                failures += 1
                log.warning("realtime catch-up failed; retrying",
                            extra={"error": type(exc).__name__, "attempts": failures})
            except Exception:  # a bug must not stop every client's updates; log and go on
                failures += 1
                log.exception("realtime catch-up crashed", extra={"attempts": failures})
            finally:
                self._finished += 1
                async with self._done:
                    self._done.notify_all()

    async def _run_batches(self) -> None:
        """Read and fan out until the read reaches its snapshot's horizon."""
        while True:
            plan = [sub for subs in self._subs.values() for sub in subs]
            if not plan:
                return
            after = min(sub.covered for sub in plan)
            users = list({sub.user_id for sub in plan})
            began = time.perf_counter()
            async with self.db.connection() as conn:
                changes = await store.read_changes(conn, users, after, limit=self.page_size)
            self._fan_out(plan, changes)
            self.metrics.batches.observe(time.perf_counter() - began)
            if changes.complete:
                return

    def _fan_out(self, plan: list[Subscription], changes: Changes) -> None:
        by_user: dict[str, list[Change]] = {}
        for change in changes.changes:
            by_user.setdefault(change.user_id, []).append(change)
        texts: dict[int, str] = {}  # each frame is encoded once, however many sockets get it
        sent = 0
        for sub in plan:
            if not sub.active:
                continue  # detached while the read was in flight
            mine = [c for c in by_user.get(sub.user_id, ())
                    if c.position > sub.covered and sub.wants(c)]
            if mine and sub.queue.over_limit:
                # still more than the bound behind from earlier batches: too slow to keep up
                self.detach(sub)
                self.metrics.slow_closes.inc()
                sub.on_overflow()
                continue
            for change in mine:
                text = texts.get(id(change))
                if text is None:
                    text = texts[id(change)] = frames.record_frame(change)
                sub.queue.push(text)
            sent += len(mine)
            if changes.end > sub.covered:
                sub.covered = changes.end
        if sent:
            self.metrics.frames.labels("live").inc(sent)

    # -- the LISTEN connection ----------------------------------------------------------

    def _on_hint(self, payload: str) -> None:
        self.metrics.hints.inc()
        try:
            user = json.loads(payload).get("u")
        except (ValueError, AttributeError):
            user = None
        # a hint about a user with no socket here needs no read (the tick covers odd payloads)
        if user is None or user in self._subs:
            self.wake()

    async def _listen(self) -> None:
        delay = 0.1
        while True:
            lost = asyncio.Event()
            try:
                conn = await store.open_listener(self.db.url, self._on_hint, lost.set)
            except _DB_DOWN as exc:
                log.warning("realtime listener cannot connect; retrying",
                            extra={"error": type(exc).__name__, "replica": self.replica})
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_BACKOFF_S)
                continue
            delay = 0.1
            self._listener = conn
            self.listener_connects += 1
            self.metrics.listener_connects.inc()
            if self.listener_connects > 1:
                log.info("realtime listener reconnected", extra={"replica": self.replica})
            self.wake()  # hints sent while nobody listened are lost: catch up now
            try:
                while not lost.is_set() and not conn.is_closed():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(lost.wait(), 5.0)
                log.warning("realtime listener connection lost", extra={"replica": self.replica})
            finally:
                self._listener = None
                await store.close_listener(conn)
