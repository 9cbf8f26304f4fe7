"""Turns remember how far they have handed the thread to the model.

``turns.delivered_through`` is the highest message id a turn has handed to its model (by the
claim's history or an inbox delivery). The inbox uses it to find assistant rows flagged
``source_meta.guard = 'forged'`` since the last delivery with an index range scan
(``messages_thread_id``) instead of reading the whole thread at every step boundary.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE turns ADD COLUMN delivered_through bigint NOT NULL DEFAULT 0")


def downgrade() -> None:
    op.execute("ALTER TABLE turns DROP COLUMN delivered_through")
