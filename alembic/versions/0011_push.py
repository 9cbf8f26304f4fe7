"""The push claim's index: due rows per user (expand only).

* ``push_outbox_user_ready (user_id, next_attempt_at, id) WHERE status IN ('pending',
  'sending')`` — the dispatcher's claim walks it user by user (one probe finds the next user
  with a due row; a range scan takes that user's oldest due rows), so a claim costs the rows
  it takes, not the size of the backlog (``maxclaw.push.store.CLAIM_DUE``).

Built ``CONCURRENTLY`` outside the migration's transaction (docs/operations.md, expand then
contract): writers are not blocked while it builds. ``push_outbox_ready`` stays: the outbox
gauge reads the oldest due row through it.

Revision ID: 0006_push
Revises: 0006_user_keys
Applied as number 11 (this file's prefix); the revision id is what databases record in
``alembic_version``, so it keeps the name it was released with.
Create Date: 2026-12-01
"""

from alembic import op

revision = "0006_push"
down_revision = "0006_user_keys"
branch_labels = None
depends_on = None

INDEX = ("push_outbox_user_ready", "push_outbox (user_id, next_attempt_at, id)"
         " WHERE status IN ('pending', 'sending')")


def upgrade() -> None:
    name, definition = INDEX
    with op.get_context().autocommit_block():
        # IF NOT EXISTS: a build interrupted half-way is finished by the next run. (An
        # interrupted CONCURRENTLY build leaves an INVALID index; drop it and migrate again.)
        op.execute(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON {definition}")


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {INDEX[0]}")
