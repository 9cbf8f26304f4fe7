"""The lease-lapse tick: a dead runtime's thread stops showing ``running`` within seconds, and
the background jobs it reported under its runtime lease end as lost (``leases/service.py``)."""

from __future__ import annotations

from maxclaw.jobs import PeriodicJob
from maxclaw.leases.service import RuntimeLeaseService
from maxclaw.turns.service import TurnService

LAPSE_INTERVAL_S = 5.0


class LapseJob(PeriodicJob):
    """Lapse expired leases on a short tick, so a dead runtime's thread does not show
    ``running`` until the next claim looks (claims lapse turn leases too), nor ``working in
    the background`` for ever (runtime leases lapse only here and on a late heartbeat)."""

    name = "turn-lapse"

    def __init__(self, turns: TurnService, leases: RuntimeLeaseService,
                 interval_s: float = LAPSE_INTERVAL_S) -> None:
        super().__init__(interval_s, run_at_start=False)
        self.turns = turns
        self.leases = leases

    async def run_once(self) -> None:
        try:
            await self.turns.lapse_expired()
        finally:  # one failing must not starve the other
            await self.leases.lapse_expired()
