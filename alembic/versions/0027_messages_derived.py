"""A message's size and search documents computed by a trigger, not by generated columns.

``messages.size`` (0015_row_size), ``search_fts`` and ``search_han`` (0024_search_stored) were
stored generated columns. PostgreSQL 15 reads a generated column's expression from the catalog,
parses and plans it again at the start of every statement that inserts into or updates the
table (``ExecInitStoredGenerated``): with these three (the search ones walk the card's
arguments with a JSON path and rewrite Han text) that was 5% of PostgreSQL's CPU in the round
trip (``python -m bench.profile postgres``; docs/benchmarks.md, issue 33 item 1). A BEFORE
trigger in PL/pgSQL computes the same values with expressions planned once per session,
makes the searched text once (the two generated columns made it twice), and keeps the
documents on an update that leaves the text alone (the card mirror, which writes
``display``). Three message writes cost 0.87-0.89 ms against 0.75-0.78 ms with the trigger
(pgbench, three pairs, alternating).

The columns stay, with their values and their indexes: ``ALTER COLUMN … DROP EXPRESSION``
only changes the catalog (no rewrite; an ``ACCESS EXCLUSIVE`` lock for that moment). Expand-only:
no writer names these columns (a generated column could not be written), and a replica of the
previous release gets the same values from the trigger.

The downgrade turns them back into generated columns, which PostgreSQL can only do by dropping
and adding them: it rewrites ``messages`` and rebuilds ``messages_user_sync`` and the two search
indexes, as 0015 and 0024 did.

Revision ID: 0027_messages_derived
Revises: 0026_live_activity_per_user
Create Date: 2026-12-07
"""

from alembic import op

from maxclaw.db.migrate import earlier_migration

revision = "0027_messages_derived"
down_revision = "0026_live_activity_per_user"
branch_labels = None
depends_on = None

# live.sql as of this revision (a migration never imports the moving schema)
TRIGGER = r"""
CREATE FUNCTION maxclaw_messages_derived() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    doc text;
BEGIN
    NEW.size := octet_length(coalesce(NEW.body, ''))
        + octet_length(coalesce(NEW.content::text, ''))
        + 2 * octet_length(coalesce(NEW.tool_calls::text, ''))
        + octet_length(coalesce(NEW.display::text, ''))
        + octet_length(coalesce(NEW.source_meta::text, ''))
        + octet_length(coalesce(NEW.tool_call_id, ''));
    IF TG_OP = 'UPDATE' AND NEW.body IS NOT DISTINCT FROM OLD.body
       AND NEW.tool_calls IS NOT DISTINCT FROM OLD.tool_calls
       AND NEW.role IS NOT DISTINCT FROM OLD.role
       AND NEW.sensitive IS NOT DISTINCT FROM OLD.sensitive THEN
        NEW.search_fts := OLD.search_fts;
        NEW.search_han := OLD.search_han;
    ELSIF NOT NEW.sensitive AND NEW.role IN ('user', 'assistant') THEN
        doc := left(coalesce(NEW.body, '') || ' ' || coalesce(jsonb_path_query_array(
                   NEW.tool_calls, 'strict $[*]?(@."name" == "ask_user_question")'
                   '."arguments".**?(@.type() == "string")')::text, ''), 20000);
        NEW.search_fts := to_tsvector('english', doc);
        NEW.search_han := to_tsvector('simple', regexp_replace(doc, '([一-鿿])', ' \1 ', 'g'));
    ELSE
        NEW.search_fts := NULL;
        NEW.search_han := NULL;
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER messages_derived BEFORE INSERT OR UPDATE ON messages
    FOR EACH ROW EXECUTE FUNCTION maxclaw_messages_derived();
"""

def upgrade() -> None:
    op.execute("ALTER TABLE messages ALTER COLUMN size DROP EXPRESSION,"
               " ALTER COLUMN search_fts DROP EXPRESSION,"
               " ALTER COLUMN search_han DROP EXPRESSION")
    op.execute(TRIGGER)


def downgrade() -> None:
    # the generated columns as 0015 and 0024 declared them, from their own scripts
    sizes = earlier_migration("0015_row_size")
    search = earlier_migration("0024_search_stored")
    extended = bool(op.get_bind().exec_driver_sql(search.HAVE_EXTENSIONS).scalar())
    op.execute("DROP TRIGGER messages_derived ON messages")
    op.execute("DROP FUNCTION maxclaw_messages_derived()")
    op.execute("DROP INDEX messages_user_sync")
    op.execute("DROP INDEX messages_search_fts")
    op.execute("DROP INDEX messages_search_han")
    op.execute("ALTER TABLE messages DROP COLUMN size, DROP COLUMN search_fts,"
               " DROP COLUMN search_han")
    op.execute(f"ALTER TABLE messages"
               f" ADD COLUMN size bigint GENERATED ALWAYS AS ({sizes.MESSAGE_SIZE}) STORED,"
               f" ADD COLUMN search_fts tsvector GENERATED ALWAYS AS ({search.SEARCH_FTS})"
               f" STORED, ADD COLUMN search_han tsvector GENERATED ALWAYS AS"
               f" ({search.SEARCH_HAN}) STORED,"
               f" ALTER COLUMN search_fts SET STATISTICS {search.STATISTICS_TARGET},"
               f" ALTER COLUMN search_han SET STATISTICS {search.STATISTICS_TARGET}")
    op.execute("CREATE INDEX messages_user_sync ON messages (user_id, xid, rev) INCLUDE (size)")
    for statement in search.EXTENDED_INDEXES if extended else search.BUILTIN_INDEXES:
        op.execute(statement)
