"""The trust boundary (issue 14).

- Component ids are scoped to their owner: ``message_components`` is keyed by
  ``(user_id, id)`` and a carrier's dedupe key is unique per user, so one tenant can neither
  collide with nor probe for another's ids (a model server numbering calls ``call_0``,
  ``call_1`` in every thread is fine across users).
- Tokens can expire (``expires_at``), say when they were last used (``last_used_at``), and an
  unbound agent token may be flagged for Main (``for_main``); only such tokens (or ones bound
  to Main's thread) write in Main's thread.
- The audit trail names the token that acted (``component_audit.token_id``).
- WebSocket tickets: short-lived, single-use, stored by hash (``ws_tickets``).

Revision ID: 0005_trust
Revises: 0004
Create Date: 2026-12-01
"""

from alembic import op

revision = "0005_trust"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
ALTER TABLE message_components DROP CONSTRAINT message_components_pkey;
ALTER TABLE message_components ADD CONSTRAINT message_components_pkey PRIMARY KEY (user_id, id);
ALTER TABLE decisions DROP CONSTRAINT decisions_dedupe_key_key;
ALTER TABLE decisions ADD CONSTRAINT decisions_user_dedupe_key UNIQUE (user_id, dedupe_key);
DROP INDEX component_audit_component;
CREATE INDEX component_audit_component ON component_audit (user_id, component_id, id);
ALTER TABLE component_audit ADD COLUMN token_id bigint;
ALTER TABLE api_tokens ADD COLUMN expires_at timestamptz;
ALTER TABLE api_tokens ADD COLUMN last_used_at timestamptz;
ALTER TABLE api_tokens ADD COLUMN for_main boolean NOT NULL DEFAULT false;
ALTER TABLE api_tokens ADD CONSTRAINT api_tokens_for_main_check
    CHECK (NOT for_main OR role = 'agent');
CREATE TABLE ws_tickets (
    ticket_hash text PRIMARY KEY,
    token_id bigint NOT NULL REFERENCES api_tokens (id) ON DELETE CASCADE,
    user_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    expires_at timestamptz NOT NULL
);
CREATE INDEX ws_tickets_expires ON ws_tickets (expires_at);
""")


def downgrade() -> None:
    op.execute("""
DROP TABLE ws_tickets;
ALTER TABLE api_tokens DROP CONSTRAINT api_tokens_for_main_check;
ALTER TABLE api_tokens DROP COLUMN for_main;
ALTER TABLE api_tokens DROP COLUMN last_used_at;
ALTER TABLE api_tokens DROP COLUMN expires_at;
ALTER TABLE component_audit DROP COLUMN token_id;
DROP INDEX component_audit_component;
CREATE INDEX component_audit_component ON component_audit (component_id, id);
ALTER TABLE decisions DROP CONSTRAINT decisions_user_dedupe_key;
ALTER TABLE decisions ADD CONSTRAINT decisions_dedupe_key_key UNIQUE (dedupe_key);
ALTER TABLE message_components DROP CONSTRAINT message_components_pkey;
ALTER TABLE message_components ADD CONSTRAINT message_components_pkey PRIMARY KEY (id);
""")
