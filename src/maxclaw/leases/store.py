"""SQL for runtime leases and the jobs held under them. Every query a caller makes is scoped by
``user_id``; only the lapse tick (a system job, like the turns' lapse) looks across users, and
it hands each user's rows on by ``(user_id, …)`` pairs.

Locks are taken in one order everywhere, so nothing deadlocks: the lease, then the leased job,
then the thread. A job's start under a lease locks the lease ``FOR SHARE`` (the tick skips it
this pass), its end deletes its ``leased_jobs`` row before it touches the thread, and the tick
locks leases, deletes their jobs, then locks their threads in key order.
"""

from __future__ import annotations

from datetime import datetime

import asyncpg

from maxclaw.leases.rows import LapsedLease, LeaseRow, LostJob

LEASE_COLUMNS = "id::text, user_id::text, runtime, status, lease_until"

CREATE_LEASE = f"""
INSERT INTO runtime_leases (user_id, runtime, lease_until) VALUES ($1::uuid, $2, $3)
RETURNING {LEASE_COLUMNS}
"""
# A heartbeat moves an active lease that has not run out; nothing else.
EXTEND_LEASE = f"""
UPDATE runtime_leases SET lease_until = $4
 WHERE user_id = $1::uuid AND id = $2::uuid AND status = 'active' AND lease_until >= $3
RETURNING {LEASE_COLUMNS}
"""
GET_LEASE = f"SELECT {LEASE_COLUMNS} FROM runtime_leases WHERE user_id = $1::uuid AND id = $2::uuid"
# A job's start under a lease: the lease, locked FOR SHARE until the start commits, so the
# tick cannot lapse it (and miss the job) in between; the tick skips it this pass.
LOCK_LEASE_SHARE = f"""
SELECT {LEASE_COLUMNS} FROM runtime_leases
 WHERE user_id = $1::uuid AND id = $2::uuid
   FOR SHARE
"""
# Leases that ran out, oldest first, across users. SKIP LOCKED: a lease another tick holds is
# that tick's, and one a job start holds is lapsed by the next pass; the outer status check is
# the CAS, so a lease lapses once whatever runs at the same time.
LAPSE_DUE = """
UPDATE runtime_leases SET status = 'lapsed', lapsed_at = $1
 WHERE status = 'active'
   AND (user_id, id) IN (SELECT user_id, id FROM runtime_leases
                          WHERE status = 'active' AND lease_until < $1
                          ORDER BY lease_until LIMIT $2
                            FOR UPDATE SKIP LOCKED)
RETURNING id::text, user_id::text, runtime
"""
# One user's lease that ran out, found by a late heartbeat.
LAPSE_ONE = """
UPDATE runtime_leases SET status = 'lapsed', lapsed_at = $3
 WHERE user_id = $1::uuid AND id = $2::uuid AND status = 'active' AND lease_until < $3
RETURNING id::text, user_id::text, runtime
"""
# The lapsed leases' jobs, gone from leased_jobs; a job whose end was reported first left
# already (its row was deleted before its thread was touched).
TAKE_JOBS = """
DELETE FROM leased_jobs j
 USING unnest($1::uuid[], $2::uuid[], $3::text[]) AS l(user_id, lease_id, runtime)
 WHERE j.user_id = l.user_id AND j.lease_id = l.lease_id
RETURNING j.user_id::text, j.thread_id::text, j.job_id, j.lease_id::text, l.runtime
"""
# Their threads, locked in key order (two ticks lapsing jobs of one thread wait, never
# deadlock), then each job leaves its thread's running set.
LOCK_THREADS = """
SELECT t.id FROM threads t
  JOIN unnest($1::uuid[], $2::uuid[]) AS x(user_id, thread_id)
    ON t.user_id = x.user_id AND t.id = x.thread_id
 ORDER BY t.user_id, t.id
   FOR UPDATE OF t
"""
DROP_JOBS = """
UPDATE threads t
   SET background_jobs = ARRAY(SELECT b FROM unnest(t.background_jobs) AS b
                                WHERE b <> ALL(x.job_ids))
  FROM (SELECT user_id, thread_id, array_agg(job_id) AS job_ids
          FROM unnest($1::uuid[], $2::uuid[], $3::text[]) AS j(user_id, thread_id, job_id)
         GROUP BY user_id, thread_id) x
 WHERE t.user_id = x.user_id AND t.id = x.thread_id
   AND t.background_jobs && x.job_ids
"""
# One jobLost event per job (input: it waits in the inbox), and a turn for each thread unless
# one is queued or running (the running one reads the event at its next step boundary).
LOST_EVENTS = """
WITH lost AS (
    INSERT INTO messages (user_id, thread_id, role, body, source_meta)
    SELECT e.user_id, e.thread_id, 'event', e.body, e.meta
      FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::jsonb[])
           AS e(user_id, thread_id, body, meta)
    RETURNING user_id, thread_id
)
INSERT INTO turns (user_id, thread_id)
SELECT DISTINCT user_id, thread_id FROM lost
ON CONFLICT (user_id, thread_id) WHERE status IN ('queued', 'running') DO NOTHING
"""
# A job reported started under a lease (a start posted twice keeps the latest lease).
HOLD_JOB = """
INSERT INTO leased_jobs (user_id, thread_id, job_id, lease_id)
VALUES ($1::uuid, $2::uuid, $3, $4::uuid)
ON CONFLICT (user_id, thread_id, job_id) DO UPDATE SET lease_id = excluded.lease_id
"""
# A job reported finished: no lease holds it any more.
RELEASE_JOB = """
DELETE FROM leased_jobs WHERE user_id = $1::uuid AND thread_id = $2::uuid AND job_id = $3
"""


async def create_lease(conn: asyncpg.Connection, user_id: str, runtime: str,
                       lease_until: datetime) -> LeaseRow:
    return LeaseRow.from_record(await conn.fetchrow(CREATE_LEASE, user_id, runtime, lease_until))


async def extend_lease(conn: asyncpg.Connection, user_id: str, lease_id: str, now: datetime,
                       lease_until: datetime) -> LeaseRow | None:
    """Move an active lease that has not run out; None when it is unknown, lapsed or run out."""
    row = await conn.fetchrow(EXTEND_LEASE, user_id, lease_id, now, lease_until)
    return LeaseRow.from_record(row) if row else None


async def get_lease(conn: asyncpg.Connection, user_id: str, lease_id: str) -> LeaseRow | None:
    row = await conn.fetchrow(GET_LEASE, user_id, lease_id)
    return LeaseRow.from_record(row) if row else None


async def lock_lease_share(conn: asyncpg.Connection, user_id: str,
                           lease_id: str) -> LeaseRow | None:
    """The lease, locked FOR SHARE until the caller's transaction ends."""
    row = await conn.fetchrow(LOCK_LEASE_SHARE, user_id, lease_id)
    return LeaseRow.from_record(row) if row else None


async def hold_job(conn: asyncpg.Connection, user_id: str, thread_id: str, job_id: str,
                   lease_id: str) -> None:
    await conn.execute(HOLD_JOB, user_id, thread_id, job_id, lease_id)


async def release_job(conn: asyncpg.Connection, user_id: str, thread_id: str,
                      job_id: str) -> None:
    await conn.execute(RELEASE_JOB, user_id, thread_id, job_id)


async def lapse_due(conn: asyncpg.Connection, now: datetime, limit: int) -> list[LapsedLease]:
    """Mark active leases that ran out as lapsed (any user)."""
    return [LapsedLease.from_record(r) for r in await conn.fetch(LAPSE_DUE, now, limit)]


async def lapse_one(conn: asyncpg.Connection, user_id: str, lease_id: str,
                    now: datetime) -> list[LapsedLease]:
    """Lapse one lease of the user's if it ran out (zero or one rows, as ``lapse_due``)."""
    return [LapsedLease.from_record(r)
            for r in await conn.fetch(LAPSE_ONE, user_id, lease_id, now)]


async def end_jobs(conn: asyncpg.Connection, leases: list[LapsedLease]) -> list[LostJob]:
    """End the jobs of lapsed ``leases`` as lost: their rows leave ``leased_jobs`` and their
    threads' running sets, each gets a ``jobLost`` event, and each thread a turn unless one is
    active. A constant number of statements whatever the count."""
    if not leases:
        return []
    jobs = [LostJob.from_record(r) for r in await conn.fetch(
        TAKE_JOBS, [r.user_id for r in leases], [r.id for r in leases],
        [r.runtime for r in leases])]
    if not jobs:
        return []
    users = [j.user_id for j in jobs]
    threads = [j.thread_id for j in jobs]
    await conn.execute(LOCK_THREADS, users, threads)
    await conn.execute(DROP_JOBS, users, threads, [j.job_id for j in jobs])
    await conn.execute(LOST_EVENTS, users, threads, [j.body() for j in jobs],
                       [j.meta() for j in jobs])
    return jobs
