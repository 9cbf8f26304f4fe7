"""The background jobs running in each thread, for its derived state.

``threads.background_jobs`` is the set of job ids an agent runtime reported started
(``source_meta.backgroundJob.phase = "started"``) and not yet finished. It sits on the thread
row, so the thread's derived state ("working in the background (N jobs)") is read with the
thread, never by scanning its messages, and a start or an end gives the thread a new rev: every
client's thread list follows live. A text array, not a counter: a start posted twice, or an end
for a job never started, leaves the set as it was.

Adding a column with a constant default does not rewrite the table (PostgreSQL 11+).

Revision ID: 0016_background_jobs
Revises: 0015_row_size
Create Date: 2026-12-04
"""

from alembic import op

revision = "0016_background_jobs"
down_revision = "0015_row_size"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE threads ADD COLUMN background_jobs text[] NOT NULL"
               " DEFAULT '{}'::text[]")


def downgrade() -> None:
    op.execute("ALTER TABLE threads DROP COLUMN background_jobs")
