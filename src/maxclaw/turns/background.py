"""A runtime's report of a background job: ``source_meta.backgroundJob`` on an event row.

``{"job_id": "<1-200 characters>", "phase": "started" | "finished"}`` (other keys, such as
``command``, ``exit_code`` and ``tail``, are the runtime's own and stored as written). A
``phase`` left out means ``finished``: runtimes reported only a job's end before the start was
reported too, and that report keeps its meaning. The start is history, not input: it wakes
nothing (the runtime that launched the job is in the turn that launched it). The end is input:
it wakes an idle thread, as any event does. Between the two the job counts in the thread's
derived state ("working in the background (N jobs)").

A start may name the runtime's lease (``"lease_id": "<uuid>"``, ``leases/``): the job is then
held under that lease, and ends as lost (a ``jobLost`` event) if the lease lapses before the
job's end is reported. Without one (older runtimes) the job counts until its end arrives.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from maxclaw.errors import Invalid

STARTED = "started"
FINISHED = "finished"
PHASES = (STARTED, FINISHED)
MAX_JOB_ID = 200
# Running jobs one thread may have: the set lives on the thread row, which every thread page
# and frame carries, so it is bounded; a runtime past it has lost track of its jobs.
MAX_RUNNING_JOBS = 64
WHERE = ("body", "source_meta", "backgroundJob")


@dataclass(frozen=True, slots=True)
class JobReport:
    """What the service reads of a ``backgroundJob`` report."""

    job_id: str
    phase: str  # started | finished
    lease_id: str | None = None  # a start under a runtime lease (canonical UUID)

    @property
    def started(self) -> bool:
        return self.phase == STARTED


def job_report(meta: dict[str, Any] | None) -> JobReport | None:
    """The event's background-job report, None when it carries none; a malformed one is
    ``Invalid`` naming its field."""
    if not meta or "backgroundJob" not in meta:
        return None
    job = meta["backgroundJob"]
    if not isinstance(job, dict):
        raise Invalid.at([*WHERE], 'backgroundJob must be an object: {"job_id", "phase"}')
    job_id = job.get("job_id")
    if not isinstance(job_id, str) or not job_id.strip() or len(job_id) > MAX_JOB_ID:
        raise Invalid.at([*WHERE, "job_id"],
                         f"job_id must be a non-empty string of at most {MAX_JOB_ID} characters")
    phase = job.get("phase", FINISHED)
    if phase not in PHASES:
        raise Invalid.at([*WHERE, "phase"], 'phase must be "started" or "finished"')
    lease_id = job.get("lease_id")
    if lease_id is not None and phase == STARTED:
        try:
            lease_id = str(uuid.UUID(lease_id)) if isinstance(lease_id, str) else None
        except ValueError:
            lease_id = None
        if lease_id is None:
            raise Invalid.at([*WHERE, "lease_id"],
                             "lease_id must be the id of a lease (POST /v1/agent/leases)")
    return JobReport(job_id, phase, lease_id if phase == STARTED else None)
