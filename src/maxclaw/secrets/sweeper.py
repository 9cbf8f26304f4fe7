"""The retention job inside ``serve``: destroys boxes whose ``MAXCLAW_SECRET_TTL`` ran out."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from maxclaw.errors import MaxclawError
from maxclaw.secrets.service import SecretService

log = logging.getLogger("maxclaw.secrets")


class SecretSweeper:
    name = "secret-sweeper"

    def __init__(self, secrets: SecretService, interval_s: float) -> None:
        self.secrets = secrets
        self.interval_s = interval_s
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=self.name)

    async def _run(self) -> None:
        while True:
            try:
                await self.secrets.sweep()
            except MaxclawError as exc:  # the database is away; the next tick retries
                log.warning("secret sweep failed", extra={"code": exc.code})
            await asyncio.sleep(self.interval_s)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
