"""The question lifecycle: withdrawn and expired cards, and what the WebUI draws from the state.

- ``message_components.status`` may also be ``withdrawn`` (the agent withdrew or superseded the
  question) or ``expired`` (its ``expires_at`` passed unanswered); ``withdrawn_reason`` and
  ``superseded_by`` say why, ``expires_at`` when (``message_components_expiry`` serves the
  expiry sweep the way ``message_components_due`` serves the hand-off sweep).
- A carrier may be settled ``via`` ``withdrawn`` or ``expired``; ``decisions.dismissed_at``
  is when Max dismissed a panel item that stays after settling ("answered by Main").
- Every ``display.states`` entry gains ``answerable_here`` and ``main_may_take`` (the server
  now sends them; the WebUI no longer re-derives them): existing cards are backfilled here.

Revision ID: 0005_lifecycle
Revises: 0005_trust
Applied as number 6 (this file's prefix); the revision id is what databases record in
``alembic_version``, so it keeps the name it was released with.
Create Date: 2026-12-01
"""

from alembic import op

revision = "0005_lifecycle"
down_revision = "0005_trust"
branch_labels = None
depends_on = None

UNSETTLED = "('open', 'with-main', 'handed-back', 'revoked')"


def upgrade() -> None:
    op.execute("""
ALTER TABLE message_components DROP CONSTRAINT message_components_status_check;
ALTER TABLE message_components ADD CONSTRAINT message_components_status_check
  CHECK (status IN ('open', 'answered', 'with-main', 'main-answered', 'revoked', 'handed-back',
                    'withdrawn', 'expired'));
ALTER TABLE message_components ADD COLUMN expires_at timestamptz,
                               ADD COLUMN withdrawn_reason text,
                               ADD COLUMN superseded_by text;
ALTER TABLE decisions DROP CONSTRAINT decisions_settled_via_check;
ALTER TABLE decisions ADD CONSTRAINT decisions_settled_via_check
  CHECK (settled_via IS NULL OR settled_via IN ('card', 'decision', 'push', 'main', 'withdrawn',
                                                'expired'));
ALTER TABLE decisions ADD COLUMN dismissed_at timestamptz;
""")
    op.execute(f"""
CREATE INDEX message_components_expiry ON message_components (expires_at)
 WHERE status IN {UNSETTLED} AND expires_at IS NOT NULL""")
    op.execute("""
WITH comp AS (
    SELECT c.id, c.tool_message_id, c.status, t.kind AS thread_kind, t.category,
           bool_or(c.kind IN ('object', 'secret')) OVER (PARTITION BY c.tool_message_id)
               AS personal
      FROM message_components c JOIN threads t ON t.id = c.thread_id
), patch AS (
    SELECT tool_message_id, jsonb_object_agg(id, jsonb_build_object(
               'answerable_here', status IN ('open', 'revoked', 'handed-back'),
               'main_may_take', status = 'open' AND NOT personal
                                AND thread_kind NOT IN ('main', 'isolated')
                                AND category IS NULL)) AS p
      FROM comp GROUP BY tool_message_id
)
UPDATE messages m
   SET display = jsonb_set(m.display, '{states}', (
           SELECT jsonb_object_agg(e.k, e.v || coalesce(patch.p -> e.k, '{}'::jsonb))
             FROM jsonb_each(m.display -> 'states') AS e(k, v)))
  FROM patch
 WHERE m.id = patch.tool_message_id AND jsonb_typeof(m.display -> 'states') = 'object'
   AND m.display -> 'states' <> '{}'::jsonb
""")


def downgrade() -> None:
    op.execute(f"""
UPDATE message_components SET status = 'answered' WHERE status IN ('withdrawn', 'expired');
UPDATE decisions SET settled_via = NULL WHERE settled_via IN ('withdrawn', 'expired');
DROP INDEX message_components_expiry;
ALTER TABLE decisions DROP COLUMN dismissed_at;
ALTER TABLE decisions DROP CONSTRAINT decisions_settled_via_check;
ALTER TABLE decisions ADD CONSTRAINT decisions_settled_via_check
  CHECK (settled_via IS NULL OR settled_via IN ('card', 'decision', 'push', 'main'));
ALTER TABLE message_components DROP COLUMN superseded_by, DROP COLUMN withdrawn_reason,
                               DROP COLUMN expires_at;
ALTER TABLE message_components DROP CONSTRAINT message_components_status_check;
ALTER TABLE message_components ADD CONSTRAINT message_components_status_check
  CHECK (status IN ('open', 'answered', 'with-main', 'main-answered', 'revoked',
                    'handed-back'))
""")
