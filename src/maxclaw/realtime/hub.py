"""The per-process fan-out: one LISTEN connection, one catch-up reader, many local sockets.

``NOTIFY`` is only a hint. The source of truth is the catch-up read (``store.read_changes``):
one read per table, for a set of users, from the oldest position any of their sockets is
covered to, offering each change to the sockets whose scope holds it. Each subscription
records how far it is covered, so a socket that joins while a read is in flight is simply
read for in the next batch: no gap, whatever the timing.

Which users a batch reads for:
- a hint names a user and the transaction ``x`` that wrote for him (one hint per user and
  transaction: PostgreSQL sends a transaction's identical payloads once, 0029); the user is
  *pending* until every socket of theirs is covered past every row of ``x``
  (``cursor.transaction_end``). A read whose snapshot horizon is held back by an older
  transaction leaves the user pending, and the next batch reads him again.
  A hint batch reads the pending users and users who just subscribed, so its cost follows
  what changed, not how many sockets are connected (1,000 users cost 13 ms a batch before);
- a user left pending because the horizon was held back is *held*: the older transaction may
  write nothing the stream carries (a job's bookkeeping) and so send no hint when it ends, so
  held users are read again on their own short backoff (``HELD_RETRY_FIRST_S``, doubling up to
  ``realtime_poll_s``) rather than waiting for the tick;
- the periodic tick (``realtime_poll_s``), a listener reconnect and ``sync`` read for every
  user: that is what keeps the no-loss guarantee when hints are lost or were never sent
  (``maxclaw.notify = 'off'``).

A socket whose send queue is still over its bound when new changes arrive is detached and told
to close (``on_overflow``); it resumes from the last cursor it received. Several replicas each
run their own hub on the same database and see the same stream, so they behave as one.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import asyncpg
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from maxclaw.db.database import Database
from maxclaw.db.listen import Listener
from maxclaw.db.listen import Subscription as Listening
from maxclaw.errors import Unavailable
from maxclaw.realtime import frames, store
from maxclaw.realtime.cursor import ORIGIN, Position, transaction_end
from maxclaw.realtime.sendqueue import SendQueue
from maxclaw.realtime.store import Change, Changes

log = logging.getLogger("maxclaw.realtime")

DEFAULT_PAGE_SIZE = 1000  # rows per table per live read
DEFAULT_CATCH_UP_PAGE_SIZE = 500  # rows per table per page of a subscription's catch-up
DEFAULT_QUEUE_MAX_CHARS = 4 * 1024 * 1024
MAX_BACKOFF_S = 5.0
# the first re-read of users held back by an older transaction; doubles while they stay held
HELD_RETRY_FIRST_S = 0.02
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
        self.batch_bytes = Histogram("maxclaw_realtime_batch_bytes",
                                     "Bytes of rows read by one live batch (its byte budget)",
                                     registry=registry,
                                     buckets=(1024, 16384, 131072, 262144, 524288, 1048576,
                                              2097152, 4194304))
        self.hints = Counter("maxclaw_realtime_hints_total", "NOTIFY hints received",
                             registry=registry)
        self.slow_closes = Counter("maxclaw_realtime_slow_closes_total",
                                   "Sockets closed for falling behind", registry=registry)
        self.listener_connects = Counter("maxclaw_realtime_listener_connects_total",
                                         "LISTEN connections opened", registry=registry)
        self.subscriptions = Gauge("maxclaw_realtime_subscriptions",
                                   "Live subscriptions on this process", registry=registry)
        self.users_read = Counter("maxclaw_realtime_users_read_total",
                                  "Users read for by live catch-up batches", ["reason"],
                                  registry=registry)


class RealtimeHub:
    """Fans committed changes out to this process's WebSocket subscriptions (a ``Job``)."""

    name = "realtime"

    def __init__(self, db: Database, *, poll_s: float, registry: CollectorRegistry | None = None,
                 page_size: int = DEFAULT_PAGE_SIZE,
                 catch_up_page_size: int = DEFAULT_CATCH_UP_PAGE_SIZE,
                 queue_max_chars: int = DEFAULT_QUEUE_MAX_CHARS,
                 batch_bytes: int = store.DEFAULT_MAX_BYTES,
                 listener: Listener | None = None) -> None:
        self.db = db
        # the process's shared LISTEN connection (the composition root's); a hub built alone
        # opens its own at start
        self.listener = listener
        self.poll_s = poll_s
        self.page_size = page_size
        self.catch_up_page_size = catch_up_page_size
        self.queue_max_chars = queue_max_chars
        self.batch_bytes = batch_bytes  # a read's byte budget: live batches and catch-up pages
        self.replica = uuid.uuid4().hex[:8]
        self.metrics = HubMetrics(registry)
        self.running = False
        self.listener_connects = 0
        self._subs: dict[str, set[Subscription]] = {}
        # users to read for in the next hint batch: hinted positions not yet covered, and
        # users whose socket just joined; _read_all asks the next batch to read everyone
        self._pending: dict[str, Position] = {}
        self._joined: set[str] = set()
        # pending users whose last read stopped at a horizon below their hint (see _settle)
        self._held: set[str] = set()
        self.held_retry_first_s = HELD_RETRY_FIRST_S  # at least poll_s: no held retries
        self._held_retry_s = HELD_RETRY_FIRST_S
        self._read_all = False
        self._wake = asyncio.Event()
        self._started = 0
        self._finished = 0
        self._done = asyncio.Condition()
        self._tasks: list[asyncio.Task[None]] = []
        self._listening: Listening | None = None
        self._own_listener: Listener | None = None

    # -- Job -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Subscribe to the rev channel (opening the LISTEN connection) and start the pump."""
        self.running = True
        if self.listener is None:
            self.listener = self._own_listener = Listener(self.db.listen_url)
        self._listening = self.listener.subscribe(store.CHANNEL, self._on_hint,
                                                  on_reconnect=self._on_listening)
        self.listener.open()
        self._tasks = [asyncio.create_task(self._pump(), name="realtime-pump")]

    async def stop(self) -> None:
        """Stop reading and listening; sockets are closed by the server's shutdown."""
        self.running = False
        if self.listener is not None and self._listening is not None:
            self.listener.unsubscribe(self._listening)
            self._listening = None
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        if self._own_listener is not None:
            await self._own_listener.stop()
            self.listener = self._own_listener = None
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
        self._joined.add(sub.user_id)
        self._wake.set()  # read for it now rather than at the next tick

    def detach(self, sub: Subscription) -> None:
        """Stop offering changes to ``sub`` (idempotent)."""
        sub.active = False
        subs = self._subs.get(sub.user_id)
        if subs is not None and sub in subs:
            subs.discard(sub)
            self.metrics.subscriptions.dec()
            if not subs:
                del self._subs[sub.user_id]
                self._pending.pop(sub.user_id, None)
                self._joined.discard(sub.user_id)
                self._held.discard(sub.user_id)

    def wake(self) -> None:
        """Run a batch for every user as soon as the pump is free."""
        self._read_all = True
        self._wake.set()

    async def sync(self) -> None:
        """Return once a batch for every user that started after this call has run (or
        failed)."""
        if not self.running:
            await self._run_batches(list(self._subs), "sync")
            return
        target = self._started + 1
        self.wake()
        async with self._done:
            await self._done.wait_for(lambda: self._finished >= target)

    # -- the pump -----------------------------------------------------------------------

    async def _pump(self) -> None:
        failures = 0
        while True:
            retry_held = not failures and bool(self._held) and self._held_retry_s < self.poll_s
            if failures:
                delay = min(self.poll_s * 2 ** failures, MAX_BACKOFF_S)
            else:
                delay = self._held_retry_s if retry_held else self.poll_s
            try:
                await asyncio.wait_for(self._wake.wait(), delay)
                ticked = False
            except TimeoutError:
                ticked = True
            self._wake.clear()
            if ticked and retry_held:
                users, reason = self._next_users(False)[0], "held"
            else:
                users, reason = self._next_users(ticked or failures > 0)
            self._started += 1
            try:
                await self._run_batches(users, reason)
                failures = 0
                # still held: back off (a long transaction costs what the tick costs at most)
                self._held_retry_s = (min(self._held_retry_s * 2, self.poll_s) if self._held
                                      else self.held_retry_first_s)
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

    def _next_users(self, everyone: bool) -> tuple[list[str], str]:
        """Whom the next batch reads for, and why (a metrics label)."""
        joined, self._joined = self._joined, set()
        if everyone or self._read_all:
            self._read_all = False
            return list(self._subs), "tick" if everyone else "all"
        # a pending user stays pending until a read covers the hint (see _settle)
        return [u for u in {*self._pending, *joined} if u in self._subs], "hint"

    async def _run_batches(self, users: list[str], reason: str) -> None:
        """Read for ``users`` and fan out until the read reaches its snapshot's horizon."""
        self.metrics.users_read.labels(reason).inc(len(users))
        limit, paused = self.page_size, set[Subscription]()
        first = True
        while True:
            plan = [sub for user in users for sub in self._subs.get(user, ())
                    if sub not in paused]
            if not plan:
                return
            after = min(sub.covered for sub in plan)
            began = time.perf_counter()
            async with self.db.connection() as conn:
                changes = await store.read_changes(conn, list({s.user_id for s in plan}), after,
                                                   limit=limit, max_bytes=self.batch_bytes)
            paused |= self._fan_out(plan, changes, continuing=not first)
            self._settle({sub.user_id for sub in plan}, changes.end)
            self.metrics.batches.observe(time.perf_counter() - began)
            self.metrics.batch_bytes.observe(sum(c.size for c in changes.changes))
            if changes.complete:
                return
            first, limit = False, store.next_limit(changes, self.page_size)

    def _settle(self, users: set[str], end: Position) -> None:
        """Forget the hints every socket of their user is now covered past; a hint beyond the
        read's horizon ``end`` is held back by an older transaction (a paused socket's pending
        position is ``end`` itself, and waits for a hint or the tick as before)."""
        for user in users:
            pending = self._pending.get(user)
            if pending is not None and self._covered(user, pending):
                del self._pending[user]
                self._held.discard(user)
            elif pending is not None and pending > end:
                self._held.add(user)
            else:
                self._held.discard(user)

    def _covered(self, user: str, position: Position) -> bool:
        return all(sub.covered >= position for sub in self._subs.get(user, ()))

    def _fan_out(self, plan: list[Subscription], changes: Changes, *,
                 continuing: bool = False) -> set[Subscription]:
        """Queue each socket's changes; the subscriptions paused for the rest of this run."""
        by_user: dict[str, list[Change]] = {}
        for change in changes.changes:
            by_user.setdefault(change.user_id, []).append(change)
        texts: dict[int, str] = {}  # each frame is encoded once, however many sockets get it
        sent = 0
        paused: set[Subscription] = set()
        for sub in plan:
            if not sub.active:
                continue  # detached while the read was in flight
            mine = [c for c in by_user.get(sub.user_id, ())
                    if c.position > sub.covered and sub.wants(c)]
            if mine and sub.queue.over_limit and continuing:
                # one run's later batches (a large write, read a budget at a time) wait for
                # this socket to drain: it stays where it is covered and the next run (a hint,
                # the tick) reads on from there; a run's first batch judges it (below)
                paused.add(sub)
                self._pending[sub.user_id] = max(self._pending.get(sub.user_id, ORIGIN),
                                                 changes.end)
                continue
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
        return paused

    # -- the LISTEN connection ----------------------------------------------------------

    def _on_hint(self, payload: str) -> None:
        self.metrics.hints.inc()
        try:
            hint = json.loads(payload)
            user = hint["u"]
            # the whole transaction, also for a hint from before 0029 that names its row's
            # rev: a read past the transaction covers that row too
            position = transaction_end(int(hint["x"]))
        except (ValueError, KeyError, TypeError):
            self.wake()  # not a hint we can place: read everyone (the tick would anyway)
            return
        # a user with no socket here needs no read, nor one whose sockets already have it
        if user not in self._subs or self._covered(user, position):
            return
        self._pending[user] = max(self._pending.get(user, ORIGIN), position)
        self._wake.set()

    def _on_listening(self) -> None:
        """The rev channel is LISTENed (again): hints sent while nobody listened are lost, so
        every user is read for now."""
        self.listener_connects += 1
        self.metrics.listener_connects.inc()
        if self.listener_connects > 1:
            log.info("realtime listener reconnected", extra={"replica": self.replica})
        self.wake()
