"""The minute tick of the due sweep inside ``serve`` (APScheduler 3, coalescing, one instance
at a time). Exactly-once comes from the data (``FOR UPDATE SKIP LOCKED`` and the CAS), not from
the scheduler, so any number of replicas may run it."""

from __future__ import annotations

import logging

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from maxclaw.components.service import ComponentService
from maxclaw.errors import Unavailable
from maxclaw.presence.service import PresenceService

log = logging.getLogger("maxclaw.sweeper")


class Sweeper:
    name = "sweeper"

    def __init__(self, components: ComponentService, interval_s: float, batch: int,
                 presence: PresenceService | None = None) -> None:
        self.components = components
        self.presence = presence
        self.interval_s = interval_s
        self.batch = batch
        self.scheduler: AsyncIOScheduler | None = None

    async def tick(self) -> None:
        """One pass; failures are logged and retried on the next tick."""
        try:
            result = await self.components.sweep_due_all(self.batch)
            result["expired"] = await self.components.sweep_expired_all(self.batch)
            # presence re-judged: cards posted while Max watched, now that nobody does
            result["unwatched"] = await self.components.sweep_unwatched_all(self.batch)
            if self.presence is not None:  # lapsed presence rows, once judged, are purged
                result["presence_purged"] = await self.presence.purge_expired()
        except Unavailable:
            log.warning("sweep skipped: database unavailable")
            return
        except Exception:
            log.exception("sweep failed")
            return
        if any(result.values()):
            log.info("swept", extra=result)

    async def start(self) -> None:
        self.scheduler = AsyncIOScheduler()
        self.scheduler.add_job(self.tick, "interval", seconds=self.interval_s, coalesce=True,
                               max_instances=1, id="sweep_due")
        self.scheduler.start()

    async def stop(self) -> None:
        if self.scheduler is not None:
            self.scheduler.shutdown(wait=False)
            self.scheduler = None
