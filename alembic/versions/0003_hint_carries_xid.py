"""The rev hint names the writing transaction, so a replica reads only the hinted users.

The ``maxclaw_rev`` NOTIFY payload gains ``x``: the row's ``xid`` (text, as ``xid8`` prints).
With it, a realtime hub knows the exact stream position ``(x, rev)`` a hint stands for, reads
only the users whose sockets are not yet covered to it, and forgets the hint once they are
(``maxclaw.realtime.hub``). Before, every hint made the hub read every connected user.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

STAMP_REV = r"""
CREATE OR REPLACE FUNCTION maxclaw_stamp_rev() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.rev := nextval('maxclaw_rev_seq');
    NEW.xid := pg_current_xact_id();
    IF TG_OP = 'UPDATE' THEN
        NEW.updated_at := now();
    END IF;
    IF coalesce(current_setting('maxclaw.notify', true), '') <> 'off' THEN
        PERFORM pg_notify('maxclaw_rev', json_build_object(
            't', TG_TABLE_NAME, 'id', NEW.id, 'rev', NEW.rev, 'u', NEW.user_id
            {extra})::text);
    END IF;
    RETURN NEW;
END $$;
"""


def upgrade() -> None:
    op.execute(STAMP_REV.format(extra=", 'x', NEW.xid::text"))


def downgrade() -> None:
    op.execute(STAMP_REV.format(extra=""))
