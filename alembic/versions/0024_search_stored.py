"""Search's documents stored: ``messages.search_fts`` and ``messages.search_han``.

Two stored generated columns hold what the search indexes of ``0021_threads_search`` computed
from each message: the English full-text document (``to_tsvector('english', SEARCH_TEXT)``) and
the Han phrase document (``to_tsvector('simple', …)`` with each Han character a word), both
NULL on a row that may hold a secret (``SEARCHABLE_MESSAGE``: nothing of it is ever stored
here or indexed). ``messages_search_fts`` and ``messages_search_han`` are rebuilt on the
columns, in the shape the server's extensions allow (as 0021 chose it). A search then ranks
and rechecks its candidates by reading the stored document instead of computing it again per
row (the Han phrase's recheck ran ``regexp_replace`` and ``to_tsvector`` on every candidate),
and the planner has the columns' own statistics, taken from ten times the default sample
(``SET STATISTICS 1000``: how common a word is, so a rare one is not walked for through every
newest message); the expression statistics 0021 created for the two documents go. The text
the trigrams match keeps its expression statistics, also from ten times the sample: with the
default, a part of a word in 1.5% of the messages was guessed anywhere from 0.02% to 2% and
the newest messages walked backwards for it (30 to 64 ms) instead of read through the index.

Adding the columns rewrites ``messages`` (an exclusive lock while it runs: each row's documents
are computed once) and the two indexes are rebuilt in the same transaction (plain
``CREATE INDEX``: the table may be partitioned). The old indexes are dropped, not kept beside
the new ones (two more GIN indexes on every message write): a replica of the previous release
still searches correctly but without an index for its arms, so slowly, until it is replaced.

Revision ID: 0024_search_stored
Revises: 0023_runtime_leases
Create Date: 2026-12-05
"""

from alembic import op

revision = "0024_search_stored"
down_revision = "0023_runtime_leases"
branch_labels = None
depends_on = None

# schema.py as of this revision (a migration never imports the moving schema)
SEARCH_TEXT = (
    "left(coalesce(body, '') || ' ' || coalesce(jsonb_path_query_array(tool_calls, 'strict $[*]"
    " ? (@.name == \"ask_user_question\").arguments.** ? (@.type() == \"string\")')::text, ''),"
    " 20000)"
)
SEARCHABLE_MESSAGE = "NOT sensitive AND role IN ('user', 'assistant')"
HAN_TEXT = f"regexp_replace({SEARCH_TEXT}, '([\u4e00-\u9fff])', ' \\1 ', 'g')"
SEARCH_FTS = (f"CASE WHEN {SEARCHABLE_MESSAGE}"
              f" THEN to_tsvector('english'::regconfig, {SEARCH_TEXT}) END")
SEARCH_HAN = (f"CASE WHEN {SEARCHABLE_MESSAGE}"
              f" THEN to_tsvector('simple'::regconfig, {HAN_TEXT}) END")
STATISTICS_TARGET = 1000

HAVE_EXTENSIONS = ("SELECT count(*) = 2 FROM pg_extension"
                   " WHERE extname IN ('pg_trgm', 'btree_gin')")

# with both extensions: led by the owner (btree_gin), as 0021 built them
EXTENDED_INDEXES = (
    "CREATE INDEX messages_search_fts ON messages USING gin (user_id, search_fts)"
    f" WHERE {SEARCHABLE_MESSAGE}",
    "CREATE INDEX messages_search_han ON messages USING gin (user_id, search_han)"
    f" WHERE {SEARCHABLE_MESSAGE}",
)
BUILTIN_INDEXES = (
    "CREATE INDEX messages_search_fts ON messages USING gin (search_fts)"
    f" WHERE {SEARCHABLE_MESSAGE}",
    "CREATE INDEX messages_search_han ON messages USING gin (search_han)"
    f" WHERE {SEARCHABLE_MESSAGE}",
)

# 0021's, to go back to
OLD_EXTENDED_INDEXES = (
    "CREATE INDEX messages_search_fts ON messages USING gin"
    f" (user_id, to_tsvector('english'::regconfig, {SEARCH_TEXT})) WHERE {SEARCHABLE_MESSAGE}",
    "CREATE INDEX messages_search_han ON messages USING gin"
    f" (user_id, to_tsvector('simple'::regconfig, {HAN_TEXT})) WHERE {SEARCHABLE_MESSAGE}",
)
OLD_BUILTIN_INDEXES = (
    "CREATE INDEX messages_search_fts ON messages USING gin"
    f" (to_tsvector('english'::regconfig, {SEARCH_TEXT})) WHERE {SEARCHABLE_MESSAGE}",
    "CREATE INDEX messages_search_han ON messages USING gin"
    f" (to_tsvector('simple'::regconfig, {HAN_TEXT})) WHERE {SEARCHABLE_MESSAGE}",
)
OLD_STATISTICS = f"""
CREATE STATISTICS messages_search_fts_stats
    ON (to_tsvector('english'::regconfig, {SEARCH_TEXT})) FROM messages;
CREATE STATISTICS messages_search_han_stats
    ON (to_tsvector('simple'::regconfig, {HAN_TEXT})) FROM messages;
"""


def _extended() -> bool:
    return bool(op.get_bind().exec_driver_sql(HAVE_EXTENSIONS).scalar())


def upgrade() -> None:
    extended = _extended()
    op.execute("DROP INDEX messages_search_fts")
    op.execute("DROP INDEX messages_search_han")
    op.execute("DROP STATISTICS messages_search_fts_stats")
    op.execute("DROP STATISTICS messages_search_han_stats")
    op.execute(f"ALTER TABLE messages"
               f" ADD COLUMN search_fts tsvector GENERATED ALWAYS AS ({SEARCH_FTS}) STORED,"
               f" ADD COLUMN search_han tsvector GENERATED ALWAYS AS ({SEARCH_HAN}) STORED,"
               f" ALTER COLUMN search_fts SET STATISTICS {STATISTICS_TARGET},"
               f" ALTER COLUMN search_han SET STATISTICS {STATISTICS_TARGET}")
    for statement in EXTENDED_INDEXES if extended else BUILTIN_INDEXES:
        op.execute(statement)
    op.execute(f"ALTER STATISTICS messages_search_text_stats SET STATISTICS {STATISTICS_TARGET}")


def downgrade() -> None:
    extended = _extended()
    op.execute("ALTER STATISTICS messages_search_text_stats SET STATISTICS -1")
    op.execute("DROP INDEX messages_search_fts")
    op.execute("DROP INDEX messages_search_han")
    op.execute("ALTER TABLE messages DROP COLUMN search_han, DROP COLUMN search_fts")
    for statement in OLD_EXTENDED_INDEXES if extended else OLD_BUILTIN_INDEXES:
        op.execute(statement)
    op.execute(OLD_STATISTICS)
