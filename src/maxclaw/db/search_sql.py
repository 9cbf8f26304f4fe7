"""SQL text the schema and the running server share, kept free of SQLAlchemy: ``db.schema``
declares the tables and indexes with it, and the server's search and restore read it without
importing SQLAlchemy (a third of a ``serve`` start's imports; docs/benchmarks.md, issue 33
item 4, fifth pass)."""

from __future__ import annotations

# What search reads of a message: its text and, on an assistant row, every string of its
# ``ask_user_question`` calls' arguments (the card's title, questions, options), at most 20,000
# characters. Only rows that can hold no secret are indexed and searched (SEARCHABLE_MESSAGE):
# a sensitive row (a secret answer, or an agent row that repeated one) never is. The indexes
# (db.schema) and the search query (search/store.py) spell it the same, or the index is not used.
# (Spelled as alembic reads PostgreSQL's definition back, so its comparison matches.)
SEARCH_TEXT = (
    "\"left\"((COALESCE(body, ''::text) || ' '::text) || COALESCE(jsonb_path_query_array("
    "tool_calls, 'strict $[*]?(@.\"name\" == \"ask_user_question\").\"arguments\".**?(@.type() "
    "== \"string\")'::jsonpath)::text, ''::text), 20000)"
)
# Each Han character made a word of its own, for a phrase query of Han characters ("部署" is the
# phrase 部 <-> 署): what finds a two-character Chinese word through an index, where trigrams
# have none to offer (docs/domain.md, "Search").
HAN_TEXT = (f"regexp_replace({SEARCH_TEXT}, '([\u4e00-\u9fff])'::text, ' \\1 '::text,"
            " 'g'::text)")
SEARCHABLE_MESSAGE = "((NOT sensitive) AND (role = ANY (ARRAY['user'::text, 'assistant'::text])))"
# The two documents search reads, stored with each message (0024_search_stored): computed once
# per write instead of once per candidate on every search, and NULL on a row that may hold a
# secret (so nothing of it is stored here or indexed). Generated columns until 0027; since, the
# trigger maxclaw_messages_derived (live.sql) writes them, and these expressions are what it
# must compute (tests/integration/test_messages_derived.py). Their statistics are
# taken from ten times the default sample (STATISTICS_TARGET, live.sql): how common a word is.
SEARCH_FTS = (f"CASE WHEN {SEARCHABLE_MESSAGE} THEN to_tsvector('english'::regconfig, "
              f"{SEARCH_TEXT}) ELSE NULL::tsvector END")
SEARCH_HAN = (f"CASE WHEN {SEARCHABLE_MESSAGE} THEN to_tsvector('simple'::regconfig, "
              f"{HAN_TEXT}) ELSE NULL::tsvector END")

# The tables a client syncs (rev, xid and the stamp trigger; realtime's cursor).
SYNCED_TABLES = ("threads", "messages", "decisions")
