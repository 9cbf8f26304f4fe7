"""Max is told what Main did, and presence is re-judged (issue 16, items 5 and 6).

- ``push_action_tokens.scope``: what a notification's token may do. ``answer`` (every token
  so far: the buttons of a question) or ``revoke`` (the Revoke button of "Main answered …
  for you"). A NOT NULL column with a default, so release N's inserts still work (expand);
  the service checks the value (a new CHECK on an existing table would not be expand-only).
- ``message_components_unwatched``: the open cards that have no carrier yet (posted while Max
  was watching their thread). The re-judging sweep reads them through it, so a pass costs
  those cards, not every open one.

Revision ID: 0006_life_a
Revises: 0006_life_b
Applied as number 13 (this file's prefix); the revision id is what databases record in
``alembic_version``, so it keeps the name it was released with.
Create Date: 2026-12-01
"""

from alembic import op

revision = "0006_life_a"
down_revision = "0006_life_b"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE push_action_tokens ADD COLUMN scope text NOT NULL DEFAULT 'answer'")
    with op.get_context().autocommit_block():
        # IF NOT EXISTS: a build interrupted half-way is finished by the next run
        op.execute("CREATE INDEX CONCURRENTLY IF NOT EXISTS message_components_unwatched"
                   " ON message_components (posted_at)"
                   " WHERE status = 'open' AND decision_id IS NULL")


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.execute("DROP INDEX CONCURRENTLY IF EXISTS message_components_unwatched")
    op.execute("ALTER TABLE push_action_tokens DROP COLUMN scope")
