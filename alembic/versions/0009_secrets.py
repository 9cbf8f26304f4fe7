"""Secrets at rest: ``message_secrets`` holds one AES-GCM box per sensitive message.

The message row keeps a masked copy; the box (``key_id`` names the key that sealed it) holds
the plaintext the model reads. Rows answered before this revision still hold plaintext in
``messages.body``; ``serve`` seals them at its next start (the key is not available here).

Revision ID: 0005_secrets
Revises: 0005_ops
Applied as number 9 (this file's prefix); the revision id is what databases record in
``alembic_version``, so it keeps the name it was released with.
Create Date: 2026-12-01
"""

from alembic import op

revision = "0005_secrets"
down_revision = "0005_ops"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
CREATE TABLE message_secrets (
    message_id bigint PRIMARY KEY REFERENCES messages (id) ON DELETE CASCADE,
    user_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    thread_id uuid NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    kind text NOT NULL,
    component_id text,
    key_id text,
    box bytea,
    state text NOT NULL DEFAULT 'sealed',
    expires_at timestamptz NOT NULL,
    expired_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT message_secrets_kind_check CHECK (kind IN ('answer', 'echo')),
    CONSTRAINT message_secrets_state_check CHECK (state IN ('sealed', 'expired')),
    CONSTRAINT message_secrets_sealed_check
        CHECK ((state = 'sealed') = (key_id IS NOT NULL AND box IS NOT NULL))
)""")
    op.execute("""CREATE INDEX message_secrets_thread_answers ON message_secrets
                  (thread_id, message_id) WHERE kind = 'answer' AND state = 'sealed'""")
    op.execute("""CREATE INDEX message_secrets_due ON message_secrets (expires_at)
                  WHERE state = 'sealed'""")
    op.execute("""CREATE INDEX message_secrets_key ON message_secrets (key_id, message_id)
                  WHERE state = 'sealed'""")


def downgrade() -> None:
    op.execute("DROP TABLE message_secrets")
