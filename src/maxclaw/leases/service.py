"""Runtime leases: take one, heartbeat it, and end the jobs of one that lapsed.

A runtime takes a lease (``POST /v1/agent/leases``) and heartbeats it well inside
``lease_s``; each heartbeat sets ``lease_until`` to now + ``lease_s``. The background jobs it
reports started with the lease's id (``source_meta.backgroundJob.lease_id``,
``turns/messages.py``) are held under it until their end is reported. When the lease runs out
the lapse tick (``turns/lapse.py``, beside the turns' own lapse) ends them as lost, set-wise
and in one transaction: the lease becomes ``lapsed``, each job leaves its thread's running set
and gets a ``jobLost`` event, and each thread a turn (as a job's reported end would). A late
heartbeat of a lease that ran out lapses it the same way and is refused with ``409``.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import asyncpg

from maxclaw.auth.service import Principal, parse_uuid
from maxclaw.clock import Clock
from maxclaw.db.database import Database
from maxclaw.errors import Conflict, Invalid, NotFound
from maxclaw.leases import store
from maxclaw.leases.rows import ACTIVE, MAX_RUNTIME, LeaseRow, LostJob
from maxclaw.secrets.service import SecretService
from maxclaw.wire.models import RuntimeLease

log = logging.getLogger("maxclaw.leases")

LAPSE_BATCH = 100
LAPSED = ("Lease {lease_id} has lapsed (it was not renewed in time): the jobs reported under "
          "it were ended as lost. Take a new lease.")


class RuntimeLeaseService:
    """Leases of agent runtimes and the lapse of the ones that ran out."""

    def __init__(self, db: Database, clock: Clock, secrets: SecretService, *,
                 lease_s: float = 60.0) -> None:
        self.db = db
        self.clock = clock
        self.secrets = secrets  # the echo guard: the runtime's name is stored as written
        self.lease = timedelta(seconds=lease_s)

    def wire(self, lease: LeaseRow) -> RuntimeLease:
        return RuntimeLease.model_validate(
            {**lease.wire(), "lease_s": self.lease.total_seconds()})

    async def create(self, who: Principal, runtime: Any) -> RuntimeLease:
        """A new active lease for the caller's user, good for ``lease_s``."""
        if (not isinstance(runtime, str) or not runtime.strip()
                or len(runtime) > MAX_RUNTIME):
            raise Invalid.at(["body", "runtime"],
                             f"runtime must be a non-empty string of at most {MAX_RUNTIME} "
                             "characters")
        async with self.db.connection() as conn:
            # it reaches clients in jobLost events: a name holding a live secret is refused
            await self.secrets.refuse_user_echo(conn, who.user_id, {"runtime": runtime})
            lease = await store.create_lease(conn, who.user_id, runtime,
                                             self.clock.now() + self.lease)
        return self.wire(lease)

    async def heartbeat(self, who: Principal, lease_id: str) -> RuntimeLease:
        """Extend the lease; an unknown one is 404, one that lapsed (or ran out: it lapses
        now, its jobs end as lost) is 409 with ``data.status = "lapsed"``."""
        lease_id = parse_uuid(lease_id, "lease")
        now = self.clock.now()
        lost: list[LostJob] = []
        async with self.db.transaction() as conn:
            extended = await store.extend_lease(conn, who.user_id, lease_id, now,
                                                now + self.lease)
            if extended is None:
                if await store.get_lease(conn, who.user_id, lease_id) is None:
                    raise NotFound("No such lease.")
                lost = await store.end_jobs(
                    conn, await store.lapse_one(conn, who.user_id, lease_id, now))
        # raised after the commit, so the lapse and the jobs it ended stay written
        if extended is None:
            self._log_lost(lost)
            raise Conflict(LAPSED.format(lease_id=lease_id),
                           data={"status": "lapsed", "lease_id": lease_id})
        return self.wire(extended)

    async def lapse_expired(self, limit: int = LAPSE_BATCH) -> int:
        """Lapse active leases that ran out (any user) and end their jobs as lost, in one
        transaction; answers how many leases lapsed."""
        async with self.db.transaction() as conn:
            leases = await store.lapse_due(conn, self.clock.now(), limit)
            lost = await store.end_jobs(conn, leases)
        for lease in leases:
            log.warning("runtime lease lapsed", extra={"lease_id": lease.id,
                                                       "user_id": lease.user_id})
        self._log_lost(lost)
        return len(leases)

    @staticmethod
    def _log_lost(lost: list[LostJob]) -> None:
        for job in lost:
            log.warning("background job lost with its lease; its thread was woken",
                        extra={"lease_id": job.lease_id, "thread_id": job.thread_id,
                               "user_id": job.user_id, "job_id": job.job_id})

    async def hold_job(self, conn: asyncpg.Connection, user_id: str, thread_id: str,
                       job_id: str, lease_id: str) -> None:
        """Inside a job start's transaction, before its thread is touched: the lease must be
        the user's and active (404 / 409 otherwise), and holds the job until its end."""
        lease = await store.lock_lease_share(conn, user_id, lease_id)
        where = ["body", "source_meta", "backgroundJob", "lease_id"]
        if lease is None:
            raise NotFound("No such lease.", data={"loc": where})
        if lease.status != ACTIVE or lease.lease_until < self.clock.now():
            raise Conflict(LAPSED.format(lease_id=lease_id),
                           data={"status": "lapsed", "lease_id": lease_id, "loc": where})
        await store.hold_job(conn, user_id, thread_id, job_id, lease_id)

    @staticmethod
    async def release_job(conn: asyncpg.Connection, user_id: str, thread_id: str,
                          job_id: str) -> None:
        """Inside a job end's transaction, before its thread is touched."""
        await store.release_job(conn, user_id, thread_id, job_id)
