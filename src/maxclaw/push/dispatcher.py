"""The push dispatcher: claims due outbox rows, sends them, acknowledges each delivery.

Runs as a background job inside ``maxclaw serve`` (when ``run_push_dispatcher``) and alone as
``maxclaw push-worker``; any number of them may share one database.

- **Claims** take rows with ``FOR UPDATE SKIP LOCKED`` and a short lease (``push_lease_s``,
  10 s), fairly between users (``store.CLAIM_DUE``), and never more rows than the dispatcher has
  free delivery slots: a claimed row is being sent, not waiting in a batch.
- **Deliveries** run concurrently, at most ``push_concurrency`` at once and
  ``push_endpoint_concurrency`` to one host; a slot freed is refilled by the next claim.
- **Acknowledgement per delivery**: each success is marked ``sent`` as soon as it completes
  (completions that finish while one acknowledgement is being written share the next one, a
  group commit). A ``kill -9`` therefore re-sends at most the rows that were in flight at that
  moment (claimed, not yet acknowledged: at most ``push_concurrency``), with the same
  ``Idempotency-Key`` (the outbox id), once their lease lapses.
- **Heartbeats** extend the leases of every row still in flight every third of a lease, so a
  slow endpoint keeps its row rather than being raced by another dispatcher, while a dead
  dispatcher's rows are claimed again within one lease.
- **Wake-ups**: the ``maxclaw_push`` channel of the process's LISTEN connection
  (``db.listen``: the hint every enqueue sends; a (re)connect wakes it too, since hints sent
  meanwhile were unheard) and an in-process hint wake the loop at once; a poll tick covers a
  lost hint, and a scheduled retry wakes it when due. Every write that follows a send is fenced
  by the attempt number claimed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from maxclaw import tracing
from maxclaw.clock import Clock, SystemClock
from maxclaw.db.database import Database
from maxclaw.db.listen import Listener, Subscription
from maxclaw.metrics import Metrics
from maxclaw.prefs.rows import of_json
from maxclaw.push import store
from maxclaw.push.adapters.base import Adapter, Delivery, DeliveryError
from maxclaw.push.rows import ClaimedRow
from maxclaw.push.shaping import shape
from maxclaw.quotas import Quotas
from maxclaw.settings import Settings

log = logging.getLogger("maxclaw.push")

CHANNEL = "maxclaw_push"
CLAIM_MAX = 64  # rows per claim statement
# acknowledgement statements in flight at once: a completion waits for at most one write to
# finish before its own starts (with one writer it waited for a whole write plus its own)
ACK_WRITERS = 2


def backoff_delay(attempt: int, *, base_s: float, max_s: float, rng: random.Random) -> float:
    """Exponential backoff with jitter: between half and all of ``base * 2^(attempt-1)``."""
    ceiling = min(max_s, base_s * (2 ** max(attempt - 1, 0)))
    return rng.uniform(ceiling / 2, ceiling)


def endpoint_of(platform: str, config: Mapping[str, Any]) -> str:
    """The host a delivery goes to, for the per-endpoint bound (one per platform otherwise)."""
    url = config.get("url") or config.get("endpoint")
    if isinstance(url, str):
        with contextlib.suppress(ValueError):
            return f"{platform}:{urlsplit(url).netloc.lower()}"
    return platform


class Dispatcher:
    """A ``Job``: ``start`` runs the loop in a task; ``run_once`` is one claim-and-send pass."""

    name = "push-dispatcher"

    def __init__(self, db: Database, adapters: Mapping[str, Adapter], *, settings: Settings,
                 metrics: Metrics, clock: Clock | None = None, batch: int = CLAIM_MAX,
                 lease_s: float | None = None, send_timeout_s: float = 20.0,
                 poll_s: float = 1.0, concurrency: int | None = None,
                 endpoint_concurrency: int | None = None, listen: bool = True,
                 rng: random.Random | None = None, quotas: Quotas | None = None,
                 ack_writers: int = ACK_WRITERS, listener: Listener | None = None) -> None:
        self.db = db
        # the process's shared LISTEN connection (the composition root's); a dispatcher built
        # alone with ``listen`` opens its own when it starts
        self.listener = listener
        self.ack_writers = ack_writers
        self.quotas = quotas or Quotas(settings)
        self.adapters = dict(adapters)
        self.settings = settings
        self.metrics = metrics
        self.clock = clock or SystemClock()
        self.batch = batch
        self.lease_s = lease_s if lease_s is not None else settings.push_lease_s
        self.heartbeat_s = self.lease_s / 3
        self.send_timeout_s = send_timeout_s
        self.poll_s = poll_s
        self.listen = listen
        self.rng = rng or random.Random()
        self.concurrency = concurrency or settings.push_concurrency
        self.endpoint_concurrency = endpoint_concurrency or settings.push_endpoint_concurrency
        self._endpoints: dict[str, asyncio.Semaphore] = {}
        self._held: dict[int, store.Held] = {}  # in flight: outbox id -> (user, id, attempt)
        self._tasks: set[asyncio.Task[None]] = set()
        self._acks: list[tuple[Delivery, asyncio.Future[bool]]] = []
        self._ackers: set[asyncio.Task[None]] = set()
        self._more_due = False  # the last claim found rows: claim again as slots free
        self._cursor = store.FIRST_USER  # the claims' round-robin over users resumes after it
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        self._listening: Subscription | None = None
        self._own_listener: Listener | None = None
        self._next_retry: datetime | None = None

    @property
    def in_flight(self) -> int:
        """Rows claimed and not yet acknowledged (what a crash now could re-send)."""
        return len(self._held)

    def hint(self) -> None:
        """Something was queued (in-process enqueue): claim now rather than at the next tick."""
        self._wake.set()

    # -- claiming --------------------------------------------------------------------------

    async def _claim(self) -> list[asyncio.Task[None]]:
        """Claim as many due rows as there are free slots and start their deliveries."""
        free = min(self.concurrency - len(self._held), self.batch)
        if free <= 0:
            return []
        async with self.db.connection() as conn:
            rows = await store.claim_due(conn, now=self.clock.now(), limit=free,
                                         lease_s=self.lease_s, after_user=self._cursor)
        # a claim gives each user a share, so it may return fewer rows than it asked for while
        # more are due: only an empty claim says the queue is drained
        self._more_due = bool(rows)
        self._cursor = store.next_cursor(self._cursor, (row.user_id for row in rows))
        started = []
        for row in rows:
            self._held[row.id] = (row.user_id, row.id, row.attempts)
            task = asyncio.create_task(self._run_delivery(row), name="push-delivery")
            self._tasks.add(task)
            task.add_done_callback(self._delivery_done)
            started.append(task)
        return started

    def _delivery_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if self._more_due and self._room_to_refill():
            self._wake.set()

    def _room_to_refill(self) -> bool:
        """Enough free slots for another claim: a quarter of them, so a claim statement starts
        a batch of deliveries rather than one (and the slots never run dry while it runs)."""
        return self.concurrency - len(self._held) >= max(1, self.concurrency // 4)

    async def run_once(self) -> int:
        """Claim what fits in the free slots, deliver it all; returns how many were claimed."""
        async with self._heartbeating():
            tasks = await self._claim()
            if tasks:
                await asyncio.gather(*tasks)
        return len(tasks)

    async def run_until_idle(self, max_passes: int = 1000) -> int:
        """Pass after pass until nothing is due (tests and one-shot tools); returns rows claimed."""
        total = 0
        for _ in range(max_passes):
            claimed = await self.run_once()
            total += claimed
            if claimed == 0:
                break
        return total

    # -- one delivery ----------------------------------------------------------------------

    async def _run_delivery(self, row: ClaimedRow) -> None:
        outbox_id = row.id
        try:
            with tracing.span("push.deliver", outbox_id=outbox_id, platform=row.platform,
                              kind=row.kind):
                await self._deliver(row)
        except Exception:  # the row stays 'sending'; its lease lapses and it is sent again
            log.exception("push delivery could not be recorded", extra={"outbox_id": outbox_id})
        finally:
            self._held.pop(outbox_id, None)

    async def _deliver(self, row: ClaimedRow) -> None:
        """Send one row and record the outcome: acknowledged, retry, dead or device gone."""
        # his locale and quiet hours, as of now (a held notification waits for the window's
        # end without spending an attempt)
        shaped = shape(row.kind, dict(row.payload), of_json(row.user_id, row.prefs),
                       self.clock.now())
        delivery = Delivery(
            outbox_id=row.id, user_id=row.user_id, device_id=row.device_id,
            decision_id=row.decision_id, kind=row.kind, payload=shaped.payload,
            platform=row.platform, config=row.config, secret=row.secret,
            attempt=row.attempts)
        if shaped.hold_until is not None:
            async with self.db.connection() as conn:
                await store.defer(conn, user_id=delivery.user_id, outbox_id=delivery.outbox_id,
                                  attempt=delivery.attempt, at=shaped.hold_until)
            self.metrics.pushes.labels(delivery.platform, "held").inc()
            return
        if delivery.attempt > self.settings.push_max_attempts:
            # only a row whose lease lapsed after its last attempt gets here (the dispatcher
            # holding it died mid-send): give up rather than claim it forever
            await self._fail(delivery, DeliveryError(
                f"gave up after {delivery.attempt - 1} attempts (the last lease lapsed)",
                retryable=False))
            return
        wait = self.quotas.push_wait_s(delivery.user_id)
        if wait > 0:  # the user's deliveries per minute are used up: later, not an attempt
            async with self.db.connection() as conn:
                await store.defer(conn, user_id=delivery.user_id, outbox_id=delivery.outbox_id,
                                  attempt=delivery.attempt,
                                  at=self.clock.now() + timedelta(seconds=wait))
            self.metrics.pushes.labels(delivery.platform, "deferred").inc()
            return
        adapter = self.adapters.get(delivery.platform)
        key = endpoint_of(delivery.platform, delivery.config)
        slot = self._endpoints.get(key)
        if slot is None:
            slot = self._endpoints[key] = asyncio.Semaphore(self.endpoint_concurrency)
        async with slot:
            try:
                if adapter is None:
                    raise DeliveryError(f"no adapter for platform {delivery.platform!r}",
                                        retryable=False)
                await asyncio.wait_for(adapter.send(delivery), self.send_timeout_s)
            except DeliveryError as exc:
                await self._fail(delivery, exc)
                return
            except TimeoutError:
                await self._fail(delivery, DeliveryError(
                    f"send timed out after {self.send_timeout_s:g}s"))
                return
            except Exception as exc:  # an adapter bug must not kill the loop or lose the row
                log.exception("push adapter failed", extra=self._extra(delivery))
                await self._fail(delivery, DeliveryError(f"{type(exc).__name__}: {exc}"))
                return
        held = await self._acknowledge(delivery)
        self.metrics.pushes.labels(delivery.platform, "sent").inc()
        if held:
            log.info("push sent", extra=self._extra(delivery))
        else:
            log.warning("push sent after its lease was lost", extra=self._extra(delivery))

    async def _acknowledge(self, delivery: Delivery) -> bool:
        """Mark this delivery sent, sharing a statement with the others that completed while
        an earlier acknowledgement was written; False when the row was no longer ours."""
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._acks.append((delivery, done))
        if len(self._ackers) < self.ack_writers:
            task = asyncio.create_task(self._write_acks(), name="push-acks")
            self._ackers.add(task)
        return await done

    async def _write_acks(self) -> None:
        """Write queued acknowledgements until none is left, then leave the writer set in the
        same step as the last look at the queue. (A done-callback took the writer off later: an
        acknowledgement queued in between found every writer slot taken by writers that had
        already finished, and waited forever while the heartbeat kept its row's lease alive.)"""
        me = asyncio.current_task()
        try:
            await self._write_queued_acks()
        finally:
            if me is not None:
                self._ackers.discard(me)

    async def _write_queued_acks(self) -> None:
        while self._acks:
            batch, self._acks = self._acks, []
            try:
                async with self.db.connection() as conn:
                    held = await store.mark_sent_many(
                        conn, sent=[(d.user_id, d.outbox_id, d.attempt) for d, _ in batch],
                        now=self.clock.now())
            except Exception as exc:
                for _, done in batch:
                    if not done.done():
                        done.set_exception(exc)
                continue
            for delivery, done in batch:
                if not done.done():
                    done.set_result(delivery.outbox_id in held)

    # -- heartbeats ------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _heartbeating(self) -> Any:
        """Heartbeats for the duration of a block, unless the loop already runs them."""
        if self._heartbeat is not None and not self._heartbeat.done():
            yield
            return
        self._heartbeat = asyncio.create_task(self._heartbeat_loop(), name="push-heartbeat")
        try:
            yield
        finally:
            self._heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeat
            self._heartbeat = None

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_s)
            held = list(self._held.values())
            if not held:
                continue
            try:
                async with self.db.connection() as conn:
                    kept = await store.extend_leases(conn, held=held, now=self.clock.now(),
                                                     lease_s=self.lease_s)
            except Exception:
                log.exception("push lease heartbeat failed; retrying")
                continue
            lost = [i for _, i, _ in held if i not in kept and i in self._held]
            if lost:
                log.warning("push leases lost while sending", extra={"outbox_ids": lost[:20]})

    async def _fail(self, delivery: Delivery, exc: DeliveryError) -> None:
        final = not exc.retryable or delivery.attempt >= self.settings.push_max_attempts
        extra = {**self._extra(delivery), "error": exc.message}
        if exc.device_gone:
            await self._forget_device(delivery, extra)
            return
        async with self.db.transaction(notify=False) as conn:
            if final:
                dead = await store.mark_dead(conn, user_id=delivery.user_id,
                                             outbox_id=delivery.outbox_id,
                                             attempt=delivery.attempt, error=exc.message)
                if dead and exc.token_gone:
                    # an activity Max ended (or the app's start token): later states go to
                    # a new one, started with the push-to-start token
                    await store.forget_activity_token(
                        conn, user_id=delivery.user_id, device_id=delivery.device_id,
                        token=str(delivery.payload.get("token") or ""))
            else:
                delay = backoff_delay(delivery.attempt, base_s=self.settings.push_backoff_base_s,
                                      max_s=self.settings.push_backoff_max_s, rng=self.rng)
                delay = max(delay, min(exc.retry_after_s or 0.0,
                                       self.settings.push_backoff_max_s))
                at = self.clock.now() + timedelta(seconds=delay)
                status = await store.schedule_retry(conn, user_id=delivery.user_id,
                                                    outbox_id=delivery.outbox_id,
                                                    attempt=delivery.attempt,
                                                    next_attempt_at=at, error=exc.message)
                if status == "dead":  # superseded by its decision's withdraw: not retried
                    final = True
                else:
                    self._next_retry = at if self._next_retry is None \
                        else min(self._next_retry, at)
        outcome = "dead" if final else "retry"
        self.metrics.pushes.labels(delivery.platform, outcome).inc()
        log.warning("push %s", "gave up" if final else "failed; will retry", extra=extra)

    async def _forget_device(self, delivery: Delivery, extra: dict[str, Any]) -> None:
        """The receiver says the device is gone for good: remove it, as ``DELETE
        /v1/push/devices/{id}`` would, with its queued and past pushes (the log keeps why).
        Every later push to it would fail the same way."""
        async with self.db.connection() as conn:
            await store.delete_device(conn, user_id=delivery.user_id, device_id=delivery.device_id)
        self.metrics.pushes.labels(delivery.platform, "device_gone").inc()
        log.warning("push device gone; removed it and its pushes", extra=extra)

    @staticmethod
    def _extra(delivery: Delivery) -> dict[str, Any]:
        return {"outbox_id": delivery.outbox_id, "device_id": delivery.device_id,
                "decision_id": delivery.decision_id, "platform": delivery.platform,
                "kind": delivery.kind, "attempts": delivery.attempt}

    # -- the loop ------------------------------------------------------------------------

    async def start(self) -> None:
        """Run the loop in a task (inside ``serve``)."""
        self._stopping.clear()
        self._task = asyncio.create_task(self.run_forever(), name=self.name)

    async def stop(self) -> None:
        """Stop claiming, let the deliveries in flight finish (bounded by the send timeout),
        stop the loop, close adapters and the LISTEN connection."""
        self._stopping.set()
        self._wake.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), self.send_timeout_s + 5)
            except TimeoutError:
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
            self._task = None
        await self.close()

    async def close(self) -> None:
        """Release adapters' connections and the LISTEN subscription."""
        for adapter in {id(a): a for a in self.adapters.values()}.values():
            try:
                await adapter.close()
            except Exception:
                log.exception("push adapter failed to close", extra={"platform": adapter.platform})
        await self._unlisten()

    async def run_forever(self) -> None:
        """Claim into free slots until ``stop``; wake on a hint, a freed slot while more is
        due, a scheduled retry, or the poll tick. On stop, the deliveries in flight finish."""
        async with self._heartbeating():
            try:
                while not self._stopping.is_set():
                    await self._ensure_listening()
                    self._wake.clear()
                    try:
                        await self._claim()
                    except Exception:
                        log.exception("push dispatcher claim failed; retrying after the poll "
                                      "interval")
                        self._more_due = False
                    if self._more_due and self._room_to_refill():
                        continue  # more is due and there is room for it now
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), self._idle_wait())
            finally:
                if self._tasks:
                    await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def _idle_wait(self) -> float:
        wait = self.poll_s
        if self._next_retry is not None:
            until = (self._next_retry - self.clock.now()).total_seconds()
            self._next_retry = None
            wait = min(wait, max(until, 0.0))
        return wait

    async def _ensure_listening(self) -> None:
        if not self.listen:
            return
        if self.listener is None:
            self.listener = self._own_listener = Listener(self.db.listen_url)
        if self._listening is None:
            self._listening = self.listener.subscribe(CHANNEL, self._on_hint,
                                                      on_reconnect=self.hint)
        # polling still works while it is down; the listener retries in the background
        await self.listener.ensure_listening()

    def _on_hint(self, _payload: str) -> None:
        self._wake.set()

    async def _unlisten(self) -> None:
        if self.listener is not None and self._listening is not None:
            self.listener.unsubscribe(self._listening)
            self._listening = None
        if self._own_listener is not None:
            await self._own_listener.stop()
            self.listener = self._own_listener = None
