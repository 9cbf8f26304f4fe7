"""The open-cards trigger finds the thread by its key, ``(user_id, id)``; a decision's pushes
are indexed by the user and the decision.

``maxclaw_open_cards_changed`` (0006_life_b) updated ``threads WHERE id = …``. The threads'
primary key is ``(user_id, id)`` since 0006_user_keys, so that lookup had no index to use and
read every thread of every user: twice per card round trip (the post opens a card, the answer
settles it), about 7 ms at 25,000 threads, growing with the table — one user's thousands of
threads slowed everyone's answers. The function now names the user, as every statement does
(tests/integration/test_query_plans.py EXPLAINs it with the rest of the round trip).

``push_outbox_user_decision (user_id, decision_id, device_id, id)`` replaces
``push_outbox_decision (decision_id)``: an answer's withdraw reads the decision's pushes by
``user_id`` and decision, each device's newest first, and with the old index the planner could
take the primary key's ``user_id`` prefix instead and read every push of the user. The foreign key to ``decisions (user_id, id)`` is served by
the new index too.

Expand-only: the same trigger, a function body replaced in place; an index added (built
concurrently) before the old one is dropped.

Revision ID: 0007_open_cards_key
Revises: 0006_life_a
Applied as number 14 (this file's prefix); the revision id is what databases record in
``alembic_version``, so it keeps the name it was released with.
Create Date: 2026-12-02
"""

from alembic import op

revision = "0007_open_cards_key"
down_revision = "0006_life_a"
branch_labels = None
depends_on = None

# machine.UNSETTLED (tests/unit/test_thread_state.py checks the two agree)
UNSETTLED = "('open', 'with-main', 'handed-back', 'revoked')"


def _function(where: str) -> str:
    return f"""
CREATE OR REPLACE FUNCTION maxclaw_open_cards_changed() RETURNS trigger LANGUAGE plpgsql AS $$
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
         {where};
    END IF;
    RETURN NULL;
END $$;
"""


def upgrade() -> None:
    op.execute(_function("WHERE user_id = coalesce(NEW.user_id, OLD.user_id)"
                         " AND id = coalesce(NEW.thread_id, OLD.thread_id)"))
    with op.get_context().autocommit_block():
        # IF [NOT] EXISTS: a build interrupted half-way is finished by the next run
        op.execute("CREATE INDEX CONCURRENTLY IF NOT EXISTS push_outbox_user_decision"
                   " ON push_outbox (user_id, decision_id, device_id, id)")
        op.execute("DROP INDEX CONCURRENTLY IF EXISTS push_outbox_decision")


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.execute("CREATE INDEX CONCURRENTLY IF NOT EXISTS push_outbox_decision"
                   " ON push_outbox (decision_id)")
        op.execute("DROP INDEX CONCURRENTLY IF EXISTS push_outbox_user_decision")
    op.execute(_function("WHERE id = coalesce(NEW.thread_id, OLD.thread_id)"))
