"""A thread's derived state: how many of its questions are unsettled (``threads.open_cards``).

The thread list shows each thread as ``running`` / ``waiting for you`` / ``idle``, judged from
runtime state: ``turn_state`` (kept by ``maxclaw_turn_changed``) and the number of the thread's
components still waiting for an answer (``machine.UNSETTLED``: open, with-main, handed-back,
revoked — what a turn's ``finish`` reports as open). A deferred trigger on
``message_components`` keeps the count, whichever path moves a card (an answer, a withdrawal,
the expiry sweep…), at commit, and the write to ``threads`` gives the thread a new rev, so
every client's thread list follows live. A move that changes no count writes nothing to
``threads``.

Expand-only: a column with a default and a trigger; older code ignores them.

Revision ID: 0006_life_b
Revises: 0006_push
Applied as number 12 (this file's prefix); the revision id is what databases record in
``alembic_version``, so it keeps the name it was released with.
Create Date: 2026-12-01
"""

from alembic import op

revision = "0006_life_b"
down_revision = "0006_push"
branch_labels = None
depends_on = None

# machine.UNSETTLED (tests/unit/test_thread_state.py checks the two agree)
UNSETTLED = "('open', 'with-main', 'handed-back', 'revoked')"


def upgrade() -> None:
    op.execute("ALTER TABLE threads ADD COLUMN open_cards integer NOT NULL DEFAULT 0")
    # Deferred to the commit: the thread row is then the last lock every transaction takes (as
    # a wake-up's turn already is), so a card's writer (component → tool row → …) never holds
    # the thread while waiting for a component or a tool row another writer holds.
    op.execute(f"""
CREATE FUNCTION maxclaw_open_cards_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    delta int := 0;
BEGIN
    IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.status IN {UNSETTLED} THEN
        delta := delta + 1;
    END IF;
    IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.status IN {UNSETTLED} THEN
        delta := delta - 1;
    END IF;
    IF delta <> 0 THEN
        UPDATE threads SET open_cards = greatest(open_cards + delta, 0)
         WHERE id = coalesce(NEW.thread_id, OLD.thread_id);
    END IF;
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER message_components_open_cards
    AFTER INSERT OR DELETE OR UPDATE OF status ON message_components
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION maxclaw_open_cards_changed();
""")
    op.execute(f"""
UPDATE threads t SET open_cards = c.n
  FROM (SELECT thread_id, count(*)::int AS n FROM message_components
         WHERE status IN {UNSETTLED} GROUP BY thread_id) c
 WHERE t.id = c.thread_id
""")


def downgrade() -> None:
    op.execute("""
DROP TRIGGER message_components_open_cards ON message_components;
DROP FUNCTION maxclaw_open_cards_changed();
ALTER TABLE threads DROP COLUMN open_cards;
""")
