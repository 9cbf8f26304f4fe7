"""A card's components no longer hold foreign keys to their two messages (issue 33, item 1).

``message_components (user_id, message_id)`` and ``(user_id, tool_message_id)`` referenced
``messages``: every component insert checked both (two index probes and two row locks on
``messages`` per card, 0.2-0.3 ms each in pg_stat_statements, the largest single item of the
round trip's database time). The keys guarded nothing a writer can get wrong:

- the only writers (``POST_CARDS`` and ``INSERT_COMPONENTS``) insert a card's components in the
  statement (or transaction) that inserts the two messages, with the ids that insert returned;
- messages are never deleted on their own, only with their thread, which takes its components
  with it through ``(user_id, thread_id)`` (kept), or with their user.

The reliability suite's invariants check every component's assistant and tool rows after each
crash and race (tests/reliability/invariants.py). Loosening only: a previous release's writer
is unaffected.

Revision ID: 0025_component_message_keys
Revises: 0024_search_stored
Create Date: 2026-12-06
"""

from alembic import op

revision = "0025_component_message_keys"
down_revision = "0024_search_stored"
branch_labels = None
depends_on = None

KEYS = ("message_id", "tool_message_id")


def upgrade() -> None:
    for column in KEYS:
        op.execute(f"ALTER TABLE message_components"
                   f" DROP CONSTRAINT IF EXISTS message_components_{column}_fkey")


def downgrade() -> None:
    for column in KEYS:
        op.execute(f"ALTER TABLE message_components ADD CONSTRAINT message_components_{column}_fkey"
                   f" FOREIGN KEY (user_id, {column}) REFERENCES messages (user_id, id)"
                   f" ON DELETE CASCADE")
