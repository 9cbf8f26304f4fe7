"""Indexes the retention job and the database gauges read by (expand only).

* ``push_outbox_finished (status, created_at) WHERE status IN ('sent', 'dead')`` — the prune
  of delivered and dead rows, and the dead-row gauge (an index-only count);
* ``component_audit_at (at)`` — the audit prune;
* ``turns_finished (finished_at) WHERE status IN ('done', 'lapsed')`` — the turns prune and
  the recent-lapses gauge;
* ``turns_thread (thread_id, id)`` — "is there a newer turn in this thread" (the prune never
  takes a thread's newest turn).

Built ``CONCURRENTLY`` outside the migration's transaction, as docs/operations.md's
expand/contract policy asks for an index on a table that may already be large: writers are
not blocked while it builds, so replicas of the previous release keep serving.

Revision ID: 0005_ops
Revises: 0005_push_actions
Applied as number 8 (this file's prefix); the revision id is what databases record in
``alembic_version``, so it keeps the name it was released with.
Create Date: 2026-12-01
"""

from alembic import op

revision = "0005_ops"
down_revision = "0005_push_actions"
branch_labels = None
depends_on = None

INDEXES = {
    "push_outbox_finished": "push_outbox (status, created_at)"
                            " WHERE status IN ('sent', 'dead')",
    "component_audit_at": "component_audit (at)",
    "turns_finished": "turns (finished_at) WHERE status IN ('done', 'lapsed')",
    "turns_thread": "turns (thread_id, id)",
}


def upgrade() -> None:
    with op.get_context().autocommit_block():
        for name, definition in INDEXES.items():
            # IF NOT EXISTS: a build interrupted half-way is finished by the next run. (An
            # interrupted CONCURRENTLY build leaves an INVALID index; drop it and migrate again.)
            op.execute(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON {definition}")


def downgrade() -> None:
    with op.get_context().autocommit_block():
        for name in INDEXES:
            op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
