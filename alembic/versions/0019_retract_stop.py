"""Max stops a running turn (issue 30, item 2): ``turns.status`` takes ``stopped``.

A stopped turn ended because Max pressed Stop: its id fences the runtime's writes (``409
turn_stopped``) like a lapsed turn's (``409 conflict``), and nothing is queued in its place.
The prune keeps treating it as finished (``turns_finished``). Taking an answer back (item 1)
needs no schema: the answer message is marked in its ``source_meta``.

Revision ID: 0019_retract_stop
Revises: 0018_live_activity
Create Date: 2026-12-05
"""

from alembic import op

revision = "0019_retract_stop"
down_revision = "0018_live_activity"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE turns DROP CONSTRAINT turns_status_check")
    op.execute("ALTER TABLE turns ADD CONSTRAINT turns_status_check"
               " CHECK (status IN ('queued', 'running', 'done', 'lapsed', 'stopped'))")
    op.execute("DROP INDEX turns_finished")
    op.execute("CREATE INDEX turns_finished ON turns (finished_at)"
               " WHERE status IN ('done', 'lapsed', 'stopped')")


def downgrade() -> None:
    op.execute("UPDATE turns SET status = 'done' WHERE status = 'stopped'")
    op.execute("DROP INDEX turns_finished")
    op.execute("CREATE INDEX turns_finished ON turns (finished_at)"
               " WHERE status IN ('done', 'lapsed')")
    op.execute("ALTER TABLE turns DROP CONSTRAINT turns_status_check")
    op.execute("ALTER TABLE turns ADD CONSTRAINT turns_status_check"
               " CHECK (status IN ('queued', 'running', 'done', 'lapsed'))")
