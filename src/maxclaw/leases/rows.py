"""Typed rows of runtime leases and the jobs held under them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from maxclaw.db.rows import Row
from maxclaw.timefmt import rfc3339

ACTIVE = "active"
LAPSED = "lapsed"
MAX_RUNTIME = 200  # characters of a lease's runtime name


@dataclass(frozen=True, slots=True)
class LeaseRow(Row):
    """``LEASE_COLUMNS`` of ``runtime_leases``: ``active`` while ``lease_until`` is ahead,
    ``lapsed`` once found run out."""

    id: str
    user_id: str
    runtime: str
    status: str
    lease_until: datetime

    def wire(self) -> dict[str, Any]:
        """The lease as the API answers it."""
        return {"id": self.id, "runtime": self.runtime, "status": self.status,
                "lease_until": rfc3339(self.lease_until)}


@dataclass(frozen=True, slots=True)
class LapsedLease(Row):
    """A lease the tick (or a late heartbeat) just lapsed."""

    id: str
    user_id: str
    runtime: str


@dataclass(frozen=True, slots=True)
class LostJob(Row):
    """A job whose lease lapsed: it leaves its thread's running jobs as lost."""

    user_id: str
    thread_id: str
    job_id: str
    lease_id: str
    runtime: str

    def body(self) -> str:
        """The ``jobLost`` event's text, as the thread's model and Max read it."""
        return (f"Background job {self.job_id} was lost: its runtime ({self.runtime}) stopped "
                f"renewing its lease {self.lease_id}, so the job's end will never be reported. "
                "Whatever it was doing may be unfinished; check before relying on its result.")

    def meta(self) -> dict[str, Any]:
        return {"jobLost": {"job_id": self.job_id, "lease_id": self.lease_id,
                            "runtime": self.runtime}}
