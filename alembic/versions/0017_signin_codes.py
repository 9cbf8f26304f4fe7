"""One-time sign-in codes, and a name on each API token.

- ``signin_codes``: "Sign in on your phone" (``POST /v1/signin/codes``). A code is stored as
  its SHA-256 only, lives minutes, and is used once: ``used_at`` is set by the redeeming CAS
  and the row is kept until it is swept, so a second use is told apart from a wrong code.
  Keyed by the hash alone, like ``ws_tickets``: it is looked up before the user is known.
- ``api_tokens.name``: what the person called a token when minting it in the WebUI ("Claude
  Code on the laptop"), so the list says which host holds which token. Nullable: every token
  minted before, and every CLI token, has none.

Expand-only: a new table and a nullable column.

Revision ID: 0017_signin_codes
Revises: 0016_background_jobs
Create Date: 2026-12-04
"""

from alembic import op

revision = "0017_signin_codes"
down_revision = "0016_background_jobs"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE api_tokens ADD COLUMN name text")
    op.execute("""
        CREATE TABLE signin_codes (
            code_hash text PRIMARY KEY,
            user_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
            created_at timestamptz NOT NULL DEFAULT now(),
            expires_at timestamptz NOT NULL,
            used_at timestamptz
        )
    """)
    op.execute("CREATE INDEX signin_codes_expires ON signin_codes (expires_at)")


def downgrade() -> None:
    op.execute("DROP TABLE signin_codes")
    op.execute("ALTER TABLE api_tokens DROP COLUMN name")
