"""Main's time to decide (issue 31, item 3): a card with Main goes back to Max when it is up.

- ``message_components.main_due_at``: when a card handed to Main goes back to Max if Main has
  neither answered nor handed it back (set by every move to ``with-main``, cleared by every
  other move); the sweep's partial index ``message_components_main_due``.
- ``user_settings.main_timeout_minutes``: his own minutes (1 to 10,080), or null for the
  server's default (``MAXCLAW_MAIN_TIMEOUT_MINUTES``).

Expand-only: two nullable columns, a check and a partial index. Cards with Main when this runs
get 30 minutes from now (they had no clock), so none stays locked for ever.

Revision ID: 0022_main_timeout
Revises: 0021_threads_search
Create Date: 2026-12-05
"""

from alembic import op

revision = "0022_main_timeout"
down_revision = "0021_threads_search"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE message_components ADD COLUMN main_due_at timestamptz")
    op.execute("UPDATE message_components SET main_due_at = now() + interval '30 minutes'"
               " WHERE status = 'with-main'")
    op.execute("CREATE INDEX message_components_main_due ON message_components (main_due_at)"
               " WHERE status = 'with-main'")
    op.execute("ALTER TABLE user_settings ADD COLUMN main_timeout_minutes integer")
    op.execute("ALTER TABLE user_settings ADD CONSTRAINT user_settings_main_timeout_minutes_check"
               " CHECK (main_timeout_minutes BETWEEN 1 AND 10080)")


def downgrade() -> None:
    op.execute("ALTER TABLE user_settings DROP COLUMN main_timeout_minutes")
    op.execute("DROP INDEX message_components_main_due")
    op.execute("ALTER TABLE message_components DROP COLUMN main_due_at")
