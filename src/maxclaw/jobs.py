"""Background jobs run inside ``serve`` (sweeper, push dispatcher, listener, …), and the one
mechanism every periodic job uses (``PeriodicJob``: the sweeper, the lease lapse, the pruner,
the secret sweeper).

A periodic job is an asyncio task: run a pass, sleep ``interval_s``, again; one pass at a time
(a slow pass delays the next instead of overlapping it). ``stop`` cancels the task and waits
for it, so no pass is still running when the pool closes after it. A pass that fails is logged
and the next one retries: exactly-once comes from the data (``FOR UPDATE SKIP LOCKED``, the
CAS, advisory locks), never from the timer, so any number of replicas may run every job.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from abc import ABC, abstractmethod
from typing import Protocol

from maxclaw.errors import MaxclawError

log = logging.getLogger("maxclaw.jobs")


class Job(Protocol):
    """Started after the pool opens, stopped (in reverse order) before it closes."""

    name: str

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class PeriodicJob(ABC):
    """A ``Job`` that runs ``run_once`` every ``interval_s`` seconds (after each pass ends).

    ``run_at_start`` runs the first pass at once; otherwise it comes one interval after
    ``start`` (a job whose work is only due after a while, like the minute sweep)."""

    name: str

    def __init__(self, interval_s: float, *, run_at_start: bool) -> None:
        self.interval_s = interval_s
        self.run_at_start = run_at_start
        self._task: asyncio.Task[None] | None = None

    @abstractmethod
    async def run_once(self) -> None:
        """One pass. Raising is allowed: the pass is logged as failed and the next retries."""

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        if not self.run_at_start:
            await asyncio.sleep(self.interval_s)
        while True:
            try:
                await self.run_once()
            except MaxclawError as exc:  # the database is away (Unavailable): next pass retries
                log.warning("periodic job failed; the next pass retries",
                            extra={"kind": self.name, "code": exc.code})
            except Exception:  # a bug must not end the job for the life of the process
                log.exception("periodic job crashed; the next pass retries",
                              extra={"kind": self.name})
            await asyncio.sleep(self.interval_s)
