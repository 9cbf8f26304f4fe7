"""Runtime leases: a background job ends when the runtime that runs it stops heartbeating.

- ``runtime_leases``: one row per lease an agent runtime took (``POST /v1/agent/leases``),
  ``active`` while its ``lease_until`` is ahead (each heartbeat moves it), ``lapsed`` once the
  lapse tick (or a late heartbeat) found it run out. Keyed by ``(user_id, id)``.
- ``leased_jobs``: the background jobs reported started under a lease and not yet finished,
  one row per ``(user_id, thread_id, job_id)`` (the thread's ``background_jobs`` set names the
  same jobs). When the lease lapses its rows go, and each job ends as lost (a ``jobLost`` event
  on its thread, which queues a turn).
- ``runtime_leases_due``: the active leases by expiry, for the tick;
  ``runtime_leases_lapsed``: the lapsed ones by when, for retention (``maxclaw prune``).

Expand-only: two new tables and their indexes.

Revision ID: 0023_runtime_leases
Revises: 0022_main_timeout
Create Date: 2026-12-05
"""

from alembic import op

revision = "0023_runtime_leases"
down_revision = "0022_main_timeout"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
        CREATE TABLE runtime_leases (
            id uuid NOT NULL DEFAULT gen_random_uuid(),
            user_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
            runtime text NOT NULL,
            status text NOT NULL DEFAULT 'active',
            lease_until timestamptz NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now(),
            lapsed_at timestamptz,
            CONSTRAINT runtime_leases_status_check CHECK (status IN ('active', 'lapsed')),
            CONSTRAINT runtime_leases_pkey PRIMARY KEY (user_id, id)
        )
    """)
    op.execute("CREATE INDEX runtime_leases_due ON runtime_leases (lease_until)"
               " WHERE status = 'active'")
    op.execute("CREATE INDEX runtime_leases_lapsed ON runtime_leases (lapsed_at)"
               " WHERE status = 'lapsed'")
    op.execute("""
        CREATE TABLE leased_jobs (
            user_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
            thread_id uuid NOT NULL,
            job_id text NOT NULL,
            lease_id uuid NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now(),
            CONSTRAINT leased_jobs_pkey PRIMARY KEY (user_id, thread_id, job_id),
            CONSTRAINT leased_jobs_thread_id_fkey FOREIGN KEY (user_id, thread_id)
                REFERENCES threads (user_id, id) ON DELETE CASCADE,
            CONSTRAINT leased_jobs_lease_id_fkey FOREIGN KEY (user_id, lease_id)
                REFERENCES runtime_leases (user_id, id) ON DELETE CASCADE
        )
    """)
    op.execute("CREATE INDEX leased_jobs_lease ON leased_jobs (user_id, lease_id)")


def downgrade() -> None:
    op.execute("DROP TABLE leased_jobs")
    op.execute("DROP TABLE runtime_leases")
