"""The push dispatcher: claims due outbox rows, sends them, records the outcome.

Runs as a background job inside ``maxclaw serve`` (when ``run_push_dispatcher``) and alone as
``maxclaw push-worker``; any number of them may share one database. Each row is claimed with
``FOR UPDATE SKIP LOCKED`` and a lease, so two dispatchers never hold one row at once, and a
dispatcher that dies leaves a lease that lapses. A send is bounded by ``send_timeout_s``,
well under the lease, so a live dispatcher always finishes (and records) a send before anyone
else may claim the row again. The outbox id travels with every send as the idempotency key.

It polls, and also LISTENs on ``maxclaw_push`` (a hint the enqueue sends) to wake at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from maxclaw.clock import Clock, SystemClock
from maxclaw.db.database import Database, connect
from maxclaw.metrics import Metrics
from maxclaw.push import store
from maxclaw.push.adapters.base import Adapter, Delivery, DeliveryError
from maxclaw.settings import Settings

log = logging.getLogger("maxclaw.push")

CHANNEL = "maxclaw_push"
LISTEN_RETRY_S = 30.0


def backoff_delay(attempt: int, *, base_s: float, max_s: float, rng: random.Random) -> float:
    """Exponential backoff with jitter: between half and all of ``base * 2^(attempt-1)``."""
    ceiling = min(max_s, base_s * (2 ** max(attempt - 1, 0)))
    return rng.uniform(ceiling / 2, ceiling)


class Dispatcher:
    """A ``Job``: ``start`` runs the loop in a task; ``run_once`` is one claim-and-send pass."""

    name = "push-dispatcher"

    def __init__(self, db: Database, adapters: Mapping[str, Adapter], *, settings: Settings,
                 metrics: Metrics, clock: Clock | None = None, batch: int = 50,
                 lease_s: float = 60.0, send_timeout_s: float = 20.0, poll_s: float = 1.0,
                 concurrency: int = 16, listen: bool = True,
                 rng: random.Random | None = None) -> None:
        if send_timeout_s >= lease_s:
            raise ValueError("send_timeout_s must be shorter than lease_s")
        self.db = db
        self.adapters = dict(adapters)
        self.settings = settings
        self.metrics = metrics
        self.clock = clock or SystemClock()
        self.batch = batch
        self.lease_s = lease_s
        self.send_timeout_s = send_timeout_s
        self.poll_s = poll_s
        self.listen = listen
        self.rng = rng or random.Random()
        self._slots = asyncio.Semaphore(concurrency)
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._listener: asyncpg.Connection | None = None
        self._listen_tried_at = float("-inf")
        self._next_retry: datetime | None = None

    # -- one pass ------------------------------------------------------------------------

    async def run_once(self) -> int:
        """Claim one batch of due rows, send them concurrently; returns how many were claimed."""
        now = self.clock.now()
        async with self.db.connection() as conn:
            rows = await store.claim_due(conn, now=now, limit=self.batch, lease_s=self.lease_s)
        if rows:
            outcomes = await asyncio.gather(*(self._deliver(row) for row in rows))
            await self._record_sent([d for d in outcomes if d is not None])
        return len(rows)

    async def run_until_idle(self, max_passes: int = 1000) -> int:
        """Pass after pass until nothing is due (tests and one-shot tools); returns rows claimed."""
        total = 0
        for _ in range(max_passes):
            claimed = await self.run_once()
            total += claimed
            if claimed == 0:
                break
        return total

    async def _deliver(self, row: dict[str, Any]) -> Delivery | None:
        """Send one row; failures are recorded here, a success is returned for the batch."""
        delivery = Delivery(
            outbox_id=row["id"], user_id=str(row["user_id"]), device_id=row["device_id"],
            decision_id=row["decision_id"], kind=row["kind"], payload=row["payload"],
            platform=row["platform"], config=row["config"], secret=row["secret"],
            attempt=row["attempts"])
        if delivery.attempt > self.settings.push_max_attempts:
            # only a row whose lease lapsed after its last attempt gets here (the dispatcher
            # holding it died mid-send): give up rather than claim it forever
            await self._fail(delivery, DeliveryError(
                f"gave up after {delivery.attempt - 1} attempts (the last lease lapsed)",
                retryable=False))
            return None
        adapter = self.adapters.get(delivery.platform)
        async with self._slots:
            try:
                if adapter is None:
                    raise DeliveryError(f"no adapter for platform {delivery.platform!r}",
                                        retryable=False)
                await asyncio.wait_for(adapter.send(delivery), self.send_timeout_s)
            except DeliveryError as exc:
                await self._fail(delivery, exc)
                return None
            except TimeoutError:
                await self._fail(delivery, DeliveryError(
                    f"send timed out after {self.send_timeout_s:g}s"))
                return None
            except Exception as exc:  # an adapter bug must not kill the loop or lose the row
                log.exception("push adapter failed", extra=self._extra(delivery))
                await self._fail(delivery, DeliveryError(f"{type(exc).__name__}: {exc}"))
                return None
        return delivery

    async def _record_sent(self, sent: list[Delivery]) -> None:
        """Mark a pass's deliveries sent in one statement (a commit per row capped throughput;
        the cost is that a crash between send and this write re-sends the pass's rows once
        their lease lapses, with the same idempotency keys)."""
        if not sent:
            return
        async with self.db.connection() as conn:
            held = await store.mark_sent_many(
                conn, sent=[(d.outbox_id, d.attempt) for d in sent], now=self.clock.now())
        for delivery in sent:
            self.metrics.pushes.labels(delivery.platform, "sent").inc()
            if delivery.outbox_id in held:
                log.info("push sent", extra=self._extra(delivery))
            else:
                log.warning("push sent after its lease was lost", extra=self._extra(delivery))

    async def _fail(self, delivery: Delivery, exc: DeliveryError) -> None:
        final = not exc.retryable or delivery.attempt >= self.settings.push_max_attempts
        extra = {**self._extra(delivery), "error": exc.message}
        if exc.device_gone:
            await self._forget_device(delivery, extra)
            return
        async with self.db.connection() as conn:
            if final:
                await store.mark_dead(conn, outbox_id=delivery.outbox_id,
                                      attempt=delivery.attempt, error=exc.message)
            else:
                delay = backoff_delay(delivery.attempt, base_s=self.settings.push_backoff_base_s,
                                      max_s=self.settings.push_backoff_max_s, rng=self.rng)
                delay = max(delay, min(exc.retry_after_s or 0.0,
                                       self.settings.push_backoff_max_s))
                at = self.clock.now() + timedelta(seconds=delay)
                await store.schedule_retry(conn, outbox_id=delivery.outbox_id,
                                           attempt=delivery.attempt, next_attempt_at=at,
                                           error=exc.message)
                self._next_retry = at if self._next_retry is None else min(self._next_retry, at)
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
        """Finish the batch in flight, stop the loop, close adapters and the LISTEN connection."""
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
        """Release adapters' connections and the LISTEN connection."""
        for adapter in {id(a): a for a in self.adapters.values()}.values():
            try:
                await adapter.close()
            except Exception:
                log.exception("push adapter failed to close", extra={"platform": adapter.platform})
        await self._unlisten()

    async def run_forever(self) -> None:
        """Claim and send until ``stop``; wake on a hint, a scheduled retry, or the poll tick."""
        while not self._stopping.is_set():
            await self._ensure_listening()
            self._wake.clear()
            try:
                claimed = await self.run_once()
            except Exception:
                log.exception("push dispatcher pass failed; retrying after the poll interval")
                claimed = 0
            if claimed >= self.batch:
                continue  # more may be due right now
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._idle_wait())

    def _idle_wait(self) -> float:
        wait = self.poll_s
        if self._next_retry is not None:
            until = (self._next_retry - self.clock.now()).total_seconds()
            self._next_retry = None
            wait = min(wait, max(until, 0.0))
        return wait

    async def _ensure_listening(self) -> None:
        if not self.listen or (self._listener is not None and not self._listener.is_closed()):
            return
        loop = asyncio.get_running_loop()
        if loop.time() - self._listen_tried_at < LISTEN_RETRY_S:
            return
        self._listen_tried_at = loop.time()
        try:
            conn = await connect(self.db.listen_url)
            await conn.add_listener(CHANNEL, self._on_hint)
            self._listener = conn
        except Exception as exc:  # polling still works; say so once per retry period
            log.warning("push dispatcher cannot LISTEN; polling only",
                        extra={"error": f"{type(exc).__name__}: {exc}"})

    def _on_hint(self, *_: object) -> None:
        self._wake.set()

    async def _unlisten(self) -> None:
        if self._listener is not None:
            with contextlib.suppress(Exception):
                await self._listener.close()
            self._listener = None
