"""A person's settings (issue 29): locale, time zone, quiet hours, Main's defaults.

- ``user_settings``: one row per user, written on the first read or change of
  ``/v1/settings``; a user without a row has the defaults (``en``, UTC, no quiet hours).
- ``message_components.due_from``: where a card's due clock started (null: ``posted_at``),
  so a settings change can recompute ``due_at`` around quiet hours.
- ``message_components_user_open``: a user's open cards, for that recompute.

Expand-only: a new table, a nullable column and a partial index.

Revision ID: 0020_user_prefs
Revises: 0019_retract_stop
Create Date: 2026-12-05
"""

from alembic import op

revision = "0020_user_prefs"
down_revision = "0019_retract_stop"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE message_components ADD COLUMN due_from timestamptz")
    op.execute("CREATE INDEX message_components_user_open ON message_components "
               "(user_id, posted_at) WHERE status = 'open'")
    op.execute("""
        CREATE TABLE user_settings (
            user_id uuid PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
            locale text NOT NULL DEFAULT 'en',
            time_zone text NOT NULL DEFAULT 'UTC',
            quiet_hours jsonb,
            main_may_answer_during_quiet_hours boolean NOT NULL DEFAULT false,
            quiet_push text NOT NULL DEFAULT 'passive',
            main_after_minutes integer NOT NULL DEFAULT 30,
            main_may_take_cards boolean NOT NULL DEFAULT true,
            updated_at timestamptz NOT NULL DEFAULT now(),
            CONSTRAINT user_settings_locale_check CHECK (locale IN ('en', 'zh-CN')),
            CONSTRAINT user_settings_quiet_push_check CHECK (quiet_push IN ('passive', 'hold')),
            CONSTRAINT user_settings_main_after_minutes_check
                CHECK (main_after_minutes BETWEEN 0 AND 10080)
        )
    """)


def downgrade() -> None:
    op.execute("DROP TABLE user_settings")
    op.execute("DROP INDEX message_components_user_open")
    op.execute("ALTER TABLE message_components DROP COLUMN due_from")
