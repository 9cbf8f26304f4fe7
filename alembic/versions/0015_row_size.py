"""Each message row's size, stored: a page is cut from the index, not by reading every row.

``messages.size`` is a stored generated column, the bytes a page spends on the row (every
column a client's page carries, ``source_meta`` included; ``schema.MESSAGE_SIZE``). The
realtime catch-up, history pages and the model window summed ``octet_length`` of each row's
text, which reads (and detoasts) every row up to the LIMIT to return 1 MiB of them: on a
145 MB history a socket never reached ``synced``. ``messages_user_sync`` now carries
``size`` (``INCLUDE``), so the catch-up finds where its page ends in the index alone.

Adding a stored generated column rewrites the table (an exclusive lock while it runs); the
index is rebuilt in the same transaction (plain ``CREATE INDEX``: the table may be
partitioned, where ``CONCURRENTLY`` is refused).

Revision ID: 0015_row_size
Revises: 0007_open_cards_key
Create Date: 2026-12-04
"""

from alembic import op

revision = "0015_row_size"
down_revision = "0007_open_cards_key"
branch_labels = None
depends_on = None

# schema.MESSAGE_SIZE as of this revision (a migration never imports the moving schema)
MESSAGE_SIZE = (
    "octet_length(coalesce(body, '')) + octet_length(coalesce(content::text, ''))"
    " + 2 * octet_length(coalesce(tool_calls::text, ''))"
    " + octet_length(coalesce(display::text, ''))"
    " + octet_length(coalesce(source_meta::text, ''))"
    " + octet_length(coalesce(tool_call_id, ''))"
)


def upgrade() -> None:
    op.execute(f"ALTER TABLE messages ADD COLUMN size bigint"
               f" GENERATED ALWAYS AS ({MESSAGE_SIZE}) STORED")
    op.execute("DROP INDEX messages_user_sync")
    op.execute("CREATE INDEX messages_user_sync ON messages (user_id, xid, rev) INCLUDE (size)")


def downgrade() -> None:
    op.execute("DROP INDEX messages_user_sync")
    op.execute("CREATE INDEX messages_user_sync ON messages (user_id, xid, rev)")
    op.execute("ALTER TABLE messages DROP COLUMN size")
