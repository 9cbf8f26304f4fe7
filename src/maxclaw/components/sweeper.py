"""The minute tick of the due sweep inside ``serve`` (a ``PeriodicJob``: one pass at a time, the
first one interval after start). Exactly-once comes from the data (``FOR UPDATE SKIP LOCKED``
and the CAS), not from the timer, so any number of replicas may run it."""

from __future__ import annotations

import logging

from maxclaw.components.service import ComponentService
from maxclaw.errors import Unavailable
from maxclaw.jobs import PeriodicJob
from maxclaw.presence.service import PresenceService

log = logging.getLogger("maxclaw.sweeper")


class Sweeper(PeriodicJob):
    """The due, expiry, main-timeout and unwatched sweeps (and the presence purge), one pass
    per tick."""

    name = "sweeper"

    def __init__(self, components: ComponentService, interval_s: float, batch: int,
                 presence: PresenceService | None = None) -> None:
        super().__init__(interval_s, run_at_start=False)
        self.components = components
        self.presence = presence
        self.batch = batch

    async def run_once(self) -> None:
        await self.tick()

    async def tick(self) -> None:
        """One pass; failures are logged and retried on the next tick."""
        try:
            result = await self.components.sweep_due_all(self.batch)
            result["expired"] = await self.components.sweep_expired_all(self.batch)
            # after the expiry pass: a card that expired does not go back to Max
            result["main_timed_out"] = await self.components.sweep_main_timeout_all(self.batch)
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
