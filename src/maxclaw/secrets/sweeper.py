"""The retention job inside ``serve``: destroys boxes whose ``MAXCLAW_SECRET_TTL`` ran out."""

from __future__ import annotations

from maxclaw.jobs import PeriodicJob
from maxclaw.secrets.service import SecretService


class SecretSweeper(PeriodicJob):
    """One pass at start (boxes may have expired while the service was down), then every
    ``interval_s``."""

    name = "secret-sweeper"

    def __init__(self, secrets: SecretService, interval_s: float) -> None:
        super().__init__(interval_s, run_at_start=True)
        self.secrets = secrets

    async def run_once(self) -> None:
        await self.secrets.sweep()
