"""Turns remember whether they were queued only to tell the model about a forged notice.

``finish`` queues the next turn at once when the model wrote text shaped like one of the
service's notices since its last delivery, so the model hears that the text was not the
service's. A turn queued for that reason alone has ``forged_requeue = true``; if its model
forges again and there is still no new input, ``finish`` does not queue a third turn — a model
that forges on every turn would otherwise run (and cost) forever. Real input resets it: the
turns it wakes have ``false``.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE turns ADD COLUMN forged_requeue boolean NOT NULL DEFAULT false")


def downgrade() -> None:
    op.execute("ALTER TABLE turns DROP COLUMN forged_requeue")
