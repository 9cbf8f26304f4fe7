"""The search query. Every statement carries ``user_id``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import asyncpg

from maxclaw.db.rows import Row
from maxclaw.db.search_sql import SEARCH_TEXT, SEARCHABLE_MESSAGE

START, STOP = "\x02", "\x03"  # ts_headline's highlight marks (never in stored text)

# Whether the migration could build pg_trgm's indexes (0021, schema.py): read once, at start.
TRIGRAM_INDEXES = """
SELECT count(*) = 2 FROM pg_indexes
 WHERE schemaname = current_schema()
   AND indexname IN ('messages_search_trgm', 'threads_search_trgm')
"""

# $1 user, $2 the query as typed (websearch syntax), $3 an ILIKE pattern of it (escaped; NULL
# for a query of fewer than three characters), $4 limit, $5 offset, $6 candidates, $7 the
# query's Han characters spaced apart ('' when it has none: that arm is then folded away, never
# computed), $8 whether the trigram indexes exist, $9 the query's words as prefixes (a
# to_tsquery text, NULL when it has none), $10 whether the query is Han characters alone (then
# the Han phrase is the only arm: it finds every row the full text or the substring would, and
# the rank below still adds what they add). Each arm matches as its indexes do: full
# text, OR the substring through trigrams ($8) — or, without them, the words' beginnings
# (NOT $8) through the Han phrase index, whose 'simple' words are not stemmed —, OR the Han
# phrase: a BitmapOr, each scan led by user_id where btree_gin is there. The plan is made for
# the values ($8 false, or $3 NULL, drops its arm), so an arm without its index is never read.
# Each kind keeps its newest $6 matches (a word in most messages would otherwise be ranked in
# every one: the planner then walks the key backwards and stops at $6); those are ranked: the
# full-text rank of the stored document, plus one when the text holds the query as typed (a
# substring: how Chinese is found and ranked). The text is made for those candidates only, the
# snippets for the page's rows only.
SEARCH = f"""
WITH hits AS (
    SELECT 'thread' AS kind, t.id AS thread_id, NULL::bigint AS message_id, t.title AS text,
           t.created_at AS at,
           ts_rank(to_tsvector('english'::regconfig, t.title),
                   websearch_to_tsquery('english'::regconfig, $2))
           + CASE WHEN t.title ILIKE $3 THEN 1 ELSE 0 END AS rank
      FROM threads t
     WHERE t.user_id = $1::uuid
       AND (to_tsvector('english'::regconfig, t.title)
                @@ websearch_to_tsquery('english'::regconfig, $2)
            OR ($8::boolean AND t.title ILIKE $3)
            OR (NOT $8::boolean AND to_tsvector('simple'::regconfig, t.title)
                                    @@ to_tsquery('simple'::regconfig, $9)))
    UNION ALL
    SELECT CASE WHEN c.tool_calls IS NULL THEN 'message' ELSE 'card' END, c.thread_id, c.id,
           c.text, c.created_at,
           ts_rank(c.search_fts, websearch_to_tsquery('english'::regconfig, $2))
           + CASE WHEN c.text ILIKE $3 THEN 1 ELSE 0 END
      FROM (SELECT n.id, n.thread_id, n.tool_calls, n.created_at, n.search_fts,
                   {SEARCH_TEXT} AS text
              FROM (SELECT m.id, m.thread_id, m.body, m.tool_calls, m.created_at, m.search_fts
                      FROM messages m
                     WHERE m.user_id = $1::uuid AND {SEARCHABLE_MESSAGE}
                       AND ((NOT $10::boolean
                             AND m.search_fts @@ websearch_to_tsquery('english'::regconfig, $2))
                            OR (NOT $10::boolean AND $8::boolean AND {SEARCH_TEXT} ILIKE $3)
                            OR (NOT $8::boolean
                                AND m.search_han @@ to_tsquery('simple'::regconfig, $9))
                            OR ($7::text <> ''
                                AND m.search_han @@ phraseto_tsquery('simple'::regconfig, $7)))
                     ORDER BY m.id DESC
                     LIMIT $6) n) c
), page AS (
    SELECT * FROM hits ORDER BY rank DESC, at DESC, message_id DESC NULLS LAST, thread_id
     LIMIT $4 OFFSET $5
)
SELECT p.kind, p.thread_id::text, p.message_id, p.rank::float8 AS rank, p.at, p.text,
       t.title AS thread_title,
       ts_headline('english'::regconfig, p.text,
                   websearch_to_tsquery('english'::regconfig, $2),
                   'StartSel=' || chr(2) || ', StopSel=' || chr(3)
                   || ', MaxWords=30, MinWords=12, MaxFragments=1') AS headline
  FROM page p JOIN threads t ON t.user_id = $1::uuid AND t.id = p.thread_id
 ORDER BY p.rank DESC, p.at DESC, p.message_id DESC NULLS LAST, p.thread_id
"""


# Plans made for the values at hand: a generic plan (which a prepared statement may switch to)
# estimates user_id = $1 for an average user and a pattern it cannot see, and reads a heavy
# user's every message through the key; with the values, a pattern too short for trigrams
# (NULL) drops its arm and the other indexes narrow the search.
CUSTOM_PLANS = "SET LOCAL plan_cache_mode = force_custom_plan"


@dataclass(frozen=True, slots=True)
class Hit(Row):
    """One row of ``SEARCH``."""

    kind: str  # thread | message | card
    thread_id: str
    message_id: int | None
    rank: float
    at: datetime
    text: str
    thread_title: str
    headline: str


async def has_trigram_indexes(conn: asyncpg.Connection) -> bool:
    """Whether the migration built pg_trgm's indexes (``TRIGRAM_INDEXES``)."""
    return bool(await conn.fetchval(TRIGRAM_INDEXES))


async def search(conn: asyncpg.Connection, user_id: str, query: str, pattern: str | None,
                 limit: int, offset: int, candidates: int, han: str, trigrams: bool,
                 prefixes: str | None, han_only: bool) -> list[Hit]:
    """``SEARCH``, planned for these values (inside the caller's transaction)."""
    await conn.execute(CUSTOM_PLANS)
    return [Hit.from_record(r) for r in await conn.fetch(SEARCH, user_id, query, pattern, limit,
                                                         offset, candidates, han, trigrams,
                                                         prefixes, han_only)]
