"""Attach the agent runtime's turn service, its LISTEN connection and the lapse job."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from maxclaw.agent.listener import TurnListener
from maxclaw.agent.turns import TurnService
from maxclaw.container import Services
from maxclaw.errors import MaxclawError

log = logging.getLogger("maxclaw.agent")
LAPSE_INTERVAL_S = 5.0


class LapseJob:
    """Lapse expired leases on a short tick, so a dead runtime's thread does not show
    ``running`` until the next claim looks (claims lapse leases too)."""

    name = "turn-lapse"

    def __init__(self, turns: TurnService, interval_s: float = LAPSE_INTERVAL_S) -> None:
        self.turns = turns
        self.interval_s = interval_s
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=self.name)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.turns.lapse_expired()
            except MaxclawError as exc:  # the database is away; the next tick retries
                log.warning("lapse pass failed", extra={"code": exc.code})

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


def register(services: Services) -> None:
    """``services.turns`` (claim, heartbeat, inbox, finish, history) and its jobs."""
    settings = services.settings
    assert settings.database_url is not None
    listener = TurnListener(settings.database_url)
    services.turns = TurnService(services.db, services.clock, listener, services.secrets,
                                 lease_s=settings.turn_lease_s)
    services.jobs.append(listener)  # closes the LISTEN connection at shutdown
    # the lapse tick is a background job like the sweeper: tests drive lapse_expired by hand
    if settings.run_sweeper:
        services.jobs.append(LapseJob(services.turns))
