"""Hints after the commit, for the transactions that ask for it (``MAXCLAW_HINTS_AFTER_COMMIT``).

A transaction that NOTIFYs takes a lock shared by the whole cluster at its pre-commit and
holds it until its commit record is flushed, so notifying commits are flushed one after the
other, every user's alike: no group commit. Every answer and every post notifies (the rev
hint, and the turn hint when a turn is queued); on a disk whose flush takes milliseconds that
caps the whole service's commits, whatever the number of clients.

A transaction that says ``SET LOCAL maxclaw.notify = 'after_commit'`` now promises to run
``maxclaw_send_owed_hints()`` right after its COMMIT; its triggers keep the hint in a session
setting (``maxclaw.owed_rev`` / ``maxclaw.owed_turn``, taken back by a rollback with the rows)
and the function NOTIFYs it from a transaction that writes no WAL, so holds the lock for
microseconds. The service does both when ``MAXCLAW_HINTS_AFTER_COMMIT`` is on
(``db.database.HintingConnection``). Every other transaction says nothing and notifies inside
itself as before, at the cost it had (the setting is read once per row, as it was); so does a
transaction's second user on a channel. Payloads are unchanged.

Measured side by side: docs/benchmarks.md (issue 33 item 1, "Hints after the commit").

Revision ID: 0030_hints_after_commit
Revises: 0029_hint_per_transaction
Create Date: 2026-12-08
"""

from alembic import op

from maxclaw.db.migrate import earlier_migration

revision = "0030_hints_after_commit"
down_revision = "0029_hint_per_transaction"
branch_labels = None
depends_on = None

# live.sql as of this revision (a migration never imports the moving schema)
OWE_HINT = r"""
CREATE OR REPLACE FUNCTION maxclaw_owe_hint(setting text, hint text) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    owed text := coalesce(current_setting(setting, true), '');
BEGIN
    IF owed = hint THEN
        RETURN true;
    ELSIF owed <> '' THEN
        RETURN false;
    END IF;
    PERFORM set_config(setting, hint, false);
    RETURN true;
END $$;
"""

SEND_OWED_HINTS = r"""
CREATE OR REPLACE FUNCTION maxclaw_send_owed_hints() RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    rev text := coalesce(current_setting('maxclaw.owed_rev', true), '');
    turn text := coalesce(current_setting('maxclaw.owed_turn', true), '');
BEGIN
    IF rev <> '' THEN
        PERFORM pg_notify('maxclaw_rev', rev), set_config('maxclaw.owed_rev', '', false);
    END IF;
    IF turn <> '' THEN
        PERFORM pg_notify('maxclaw_turn', turn), set_config('maxclaw.owed_turn', '', false);
    END IF;
END $$;
"""

STAMP_REV = r"""
CREATE OR REPLACE FUNCTION maxclaw_stamp_rev() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    notify text := coalesce(current_setting('maxclaw.notify', true), '');
    hint text;
BEGIN
    NEW.rev := nextval('maxclaw_rev_seq');
    NEW.xid := pg_current_xact_id();
    IF TG_OP = 'UPDATE' THEN
        NEW.updated_at := now();
    END IF;
    IF notify <> 'off' THEN
        hint := json_build_object('u', NEW.user_id, 'x', NEW.xid::text)::text;
        IF notify <> 'after_commit' THEN
            PERFORM pg_notify('maxclaw_rev', hint);
        ELSIF NOT maxclaw_owe_hint('maxclaw.owed_rev', hint) THEN
            PERFORM pg_notify('maxclaw_rev', hint);
        END IF;
    END IF;
    RETURN NEW;
END $$;
"""

TURN_CHANGED = r"""
CREATE OR REPLACE FUNCTION maxclaw_turn_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    state text;
BEGIN
    SELECT CASE WHEN bool_or(status = 'running') THEN 'running'
                WHEN bool_or(status = 'queued') THEN 'queued'
                ELSE 'idle' END
      INTO state
      FROM turns WHERE user_id = NEW.user_id AND thread_id = NEW.thread_id
                   AND status IN ('queued', 'running');
    UPDATE threads SET turn_state = state
     WHERE user_id = NEW.user_id AND id = NEW.thread_id AND turn_state IS DISTINCT FROM state;
    IF NEW.status = 'queued' THEN
        IF current_setting('maxclaw.notify', true) IS DISTINCT FROM 'after_commit' THEN
            PERFORM pg_notify('maxclaw_turn', NEW.user_id::text);
        ELSIF NOT maxclaw_owe_hint('maxclaw.owed_turn', NEW.user_id::text) THEN
            PERFORM pg_notify('maxclaw_turn', NEW.user_id::text);
        END IF;
    END IF;
    RETURN NULL;
END $$;
"""



def upgrade() -> None:
    op.execute(OWE_HINT)
    op.execute(SEND_OWED_HINTS)
    op.execute(STAMP_REV)
    op.execute(TURN_CHANGED)


def downgrade() -> None:
    # the bodies 0029 and 0010_user_keys.py (revision 0006_user_keys) froze
    op.execute(earlier_migration("0029_hint_per_transaction").STAMP_REV)
    op.execute(earlier_migration("0006_user_keys").TURN_CHANGED)
    op.execute("DROP FUNCTION maxclaw_send_owed_hints()")
    op.execute("DROP FUNCTION maxclaw_owe_hint(text, text)")
