"""One rev hint per user and transaction: the ``maxclaw_rev`` payload is ``{"u", "x"}``.

Every row the rev trigger stamps sent its own hint, ``{"t", "id", "rev", "u", "x"}``: five in
an answer's one statement (the card's mirror, the answer message, the decision, the thread's
``open_cards`` and ``turn_state``), each written to the NOTIFY queue at commit, read and sent
by the LISTEN backend of every replica and parsed by its hub, which used only the user and a
position to read him to. PostgreSQL sends a transaction's identical notifications once, so
with the row's table, id and rev left out the same five rows send one hint. The hub reads the
user past the whole transaction (``realtime.cursor.transaction_end``), which is what it read
anyway: a catch-up read covers every committed row below its horizon. A hub of the previous
release cannot place a hint without ``rev`` and reads every connected user for it (its
``_on_hint``): correct, only costlier, while replicas roll over.

Measured side by side: docs/benchmarks.md (issue 33 item 1, "One hint per transaction").

Revision ID: 0029_hint_per_transaction
Revises: 0028_live_activity_check
Create Date: 2026-12-07
"""

from alembic import op

from maxclaw.db.migrate import earlier_migration

revision = "0029_hint_per_transaction"
down_revision = "0028_live_activity_check"
branch_labels = None
depends_on = None

# live.sql as of this revision (a migration never imports the moving schema)
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
            'u', NEW.user_id, 'x', NEW.xid::text)::text);
    END IF;
    RETURN NEW;
END $$;
"""


def upgrade() -> None:
    op.execute(STAMP_REV)


def downgrade() -> None:
    # 0010_user_keys.py's function (revision 0006_user_keys), as its own script froze it
    op.execute(earlier_migration("0006_user_keys").STAMP_REV.format(
        table="coalesce(TG_ARGV[0], TG_TABLE_NAME)"))
