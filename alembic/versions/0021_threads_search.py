"""Threads archived, and search: ``threads.archived_at``, its unarchive trigger, and GIN indexes.

``threads.archived_at`` hides a thread from the list until any new message of it (the
``messages_unarchive`` statement trigger clears it). Search (``GET /v1/search``) reads GIN
indexes of English full text (``to_tsvector('english', …)``) and of Han phrases (each Han
character a word: Chinese, which the built-in configurations keep as one unsegmented token).
Where the server ships the contrib extensions ``pg_trgm`` and ``btree_gin`` and the role may
create them, they are created and the indexes take their extended shape: each led by
``user_id`` (btree_gin), plus trigram indexes (pg_trgm: a substring anywhere). Elsewhere (the
embedded PostgreSQL has no contrib) the full-text and Han indexes are built without them and
search matches words, word beginnings and Han phrases (docs/domain.md, "Search"). Messages are
indexed by ``schema.SEARCH_TEXT`` (body plus a card's strings) and only rows that can hold no
secret.

Building the message indexes reads every message once (on a large table, expect minutes; the
index build takes a SHARE lock: writes wait, reads do not).

Revision ID: 0021_threads_search
Revises: 0020_user_prefs
Create Date: 2026-12-05
"""

from alembic import op

revision = "0021_threads_search"
down_revision = "0020_user_prefs"
branch_labels = None
depends_on = None

# schema.py as of this revision (a migration never imports the moving schema)
SEARCH_TEXT = (
    "left(coalesce(body, '') || ' ' || coalesce(jsonb_path_query_array(tool_calls, 'strict $[*]"
    " ? (@.name == \"ask_user_question\").arguments.** ? (@.type() == \"string\")')::text, ''),"
    " 20000)"
)
SEARCHABLE_MESSAGE = "NOT sensitive AND role IN ('user', 'assistant')"
# each Han character its own word, for a phrase query of Han characters (docs/domain.md)
HAN_TEXT = f"regexp_replace({SEARCH_TEXT}, '([\u4e00-\u9fff])', ' \\1 ', 'g')"

FUNCTIONS = """
CREATE FUNCTION maxclaw_unarchive_threads() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE threads AS t SET archived_at = NULL
      FROM (SELECT DISTINCT a.user_id, a.thread_id FROM added AS a) AS w
     WHERE t.user_id = w.user_id AND t.id = w.thread_id AND t.archived_at IS NOT NULL;
    RETURN NULL;
END $$;
CREATE TRIGGER messages_unarchive AFTER INSERT ON messages
    REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION maxclaw_unarchive_threads();
"""


# what the planner needs to know how common a word is (live.sql says why)
STATISTICS = f"""
CREATE STATISTICS messages_search_fts_stats
    ON (to_tsvector('english'::regconfig, {SEARCH_TEXT})) FROM messages;
CREATE STATISTICS messages_search_text_stats ON ({SEARCH_TEXT}) FROM messages;
CREATE STATISTICS messages_search_han_stats
    ON (to_tsvector('simple'::regconfig, {HAN_TEXT})) FROM messages;
"""


# schema.CREATE_SEARCH_EXTENSIONS and HAVE_SEARCH_EXTENSIONS as of this revision
CREATE_EXTENSIONS = """
DO $$
BEGIN
    IF (SELECT count(*) FROM pg_available_extensions
         WHERE name IN ('pg_trgm', 'btree_gin')) = 2
       AND (has_database_privilege(current_database(), 'CREATE')
            OR (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)) THEN
        CREATE EXTENSION IF NOT EXISTS pg_trgm;
        CREATE EXTENSION IF NOT EXISTS btree_gin;
    END IF;
END $$
"""
HAVE_EXTENSIONS = ("SELECT count(*) = 2 FROM pg_extension"
                   " WHERE extname IN ('pg_trgm', 'btree_gin')")

# with both extensions: each index led by the owner, and trigrams
EXTENDED_INDEXES = (
    "CREATE INDEX threads_search_fts ON threads USING gin"
    " (user_id, to_tsvector('english'::regconfig, title))",
    "CREATE INDEX threads_search_trgm ON threads USING gin (user_id, title gin_trgm_ops)",
    "CREATE INDEX messages_search_fts ON messages USING gin"
    f" (user_id, to_tsvector('english'::regconfig, {SEARCH_TEXT})) WHERE {SEARCHABLE_MESSAGE}",
    "CREATE INDEX messages_search_trgm ON messages USING gin"
    f" (user_id, ({SEARCH_TEXT}) gin_trgm_ops) WHERE {SEARCHABLE_MESSAGE}",
    "CREATE INDEX messages_search_han ON messages USING gin"
    f" (user_id, to_tsvector('simple'::regconfig, {HAN_TEXT})) WHERE {SEARCHABLE_MESSAGE}",
)
# without them: full text and Han phrases, what every PostgreSQL can index
BUILTIN_INDEXES = (
    "CREATE INDEX threads_search_fts ON threads USING gin"
    " (to_tsvector('english'::regconfig, title))",
    "CREATE INDEX messages_search_fts ON messages USING gin"
    f" (to_tsvector('english'::regconfig, {SEARCH_TEXT})) WHERE {SEARCHABLE_MESSAGE}",
    "CREATE INDEX messages_search_han ON messages USING gin"
    f" (to_tsvector('simple'::regconfig, {HAN_TEXT})) WHERE {SEARCHABLE_MESSAGE}",
)


def upgrade() -> None:
    op.execute(CREATE_EXTENSIONS)
    extended = bool(op.get_bind().exec_driver_sql(HAVE_EXTENSIONS).scalar())
    op.execute("ALTER TABLE threads ADD COLUMN archived_at TIMESTAMP WITH TIME ZONE")
    op.execute(FUNCTIONS)
    for statement in EXTENDED_INDEXES if extended else BUILTIN_INDEXES:
        op.execute(statement)
    op.execute(STATISTICS)


def downgrade() -> None:
    op.execute("DROP STATISTICS messages_search_han_stats")
    op.execute("DROP STATISTICS messages_search_text_stats")
    op.execute("DROP STATISTICS messages_search_fts_stats")
    op.execute("DROP INDEX messages_search_han")
    op.execute("DROP INDEX IF EXISTS messages_search_trgm")
    op.execute("DROP INDEX messages_search_fts")
    op.execute("DROP INDEX IF EXISTS threads_search_trgm")
    op.execute("DROP INDEX threads_search_fts")
    op.execute("DROP TRIGGER messages_unarchive ON messages")
    op.execute("DROP FUNCTION maxclaw_unarchive_threads()")
    op.execute("ALTER TABLE threads DROP COLUMN archived_at")
    op.execute("DROP EXTENSION IF EXISTS btree_gin")
    op.execute("DROP EXTENSION IF EXISTS pg_trgm")
