"""The lease-lapse tick: a dead runtime's thread stops showing ``running`` within seconds."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from maxclaw.errors import MaxclawError
from maxclaw.turns.service import TurnService

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
