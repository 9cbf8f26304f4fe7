"""``GET /v1/search``: the rules (what a query may be, the cursor, the snippet)."""

from __future__ import annotations

import base64
import binascii
import json
import re

from maxclaw.auth.service import Principal
from maxclaw.db.database import Database
from maxclaw.errors import Invalid
from maxclaw.search import store
from maxclaw.search.store import START, STOP, Hit
from maxclaw.timefmt import rfc3339
from maxclaw.wire.models import SearchHit, SearchPage

MAX_QUERY_CHARS = 200
MAX_OFFSET = 200  # deeper than the ranked candidates: refine the query
CANDIDATES = 200  # the newest matching messages ranked (store.SEARCH)
SNIPPET_CONTEXT = 60  # characters either side of a substring match


HAN = re.compile("[\u4e00-\u9fff]")


def han_phrase(query: str) -> str:
    """The query's Han characters spaced apart (``部署`` → ``部 署``: the phrase the Han index
    matches), or '' when it has none."""
    if not HAN.search(query):
        return ""
    return HAN.sub(lambda m: f" {m.group(0)} ", query)


HAN_ONLY = re.compile("[\u4e00-\u9fff]+")


def han_only(query: str) -> bool:
    """Whether the query is Han characters alone (no space, letter or mark): then the Han phrase
    finds every message the full text or the substring would (each is the characters in a row,
    so the phrase of them) and is the only arm read (``store.SEARCH``)."""
    return HAN_ONLY.fullmatch(query) is not None


WORD = re.compile("[^\\W\u4e00-\u9fff]+")  # a run of letters and digits, Han aside
PREFIX_CHARS = 3  # a shorter word is matched whole (a prefix of one or two letters is most words)


def word_prefixes(query: str) -> str | None:
    r"""The query's words as a ``to_tsquery`` text, each of three characters or more a prefix
    (``deplo serv`` → ``'deplo':* & 'serv':*``), or None when it has none: the match for parts
    of words where the trigram indexes are missing, against the unstemmed 'simple' words of the
    Han phrase index (a prefix is not a stem: ``configura`` is no prefix of ``configur``). Han
    characters are left to the Han phrase. ``\w`` holds no quote, colon or operator, so the
    text is only words."""
    words = WORD.findall(query)
    if not words:
        return None
    return " & ".join(f"'{w}':*" if len(w) >= PREFIX_CHARS else f"'{w}'" for w in words)


def like_pattern(query: str) -> str:
    """``%query%`` for ILIKE, with ``\\``, ``%`` and ``_`` taken literally."""
    escaped = query.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def encode_cursor(offset: int) -> str:
    return base64.urlsafe_b64encode(json.dumps({"o": offset}).encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> int:
    if not cursor:
        return 0
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        offset = json.loads(raw)["o"]
    except (binascii.Error, ValueError, KeyError, TypeError):
        raise Invalid.at(["query", "cursor"], "not a cursor this endpoint gave") from None
    if not isinstance(offset, int) or not 0 <= offset <= MAX_OFFSET:
        raise Invalid.at(["query", "cursor"], "not a cursor this endpoint gave")
    return offset


def marked(text: str) -> tuple[str, list[list[int]]]:
    """A headline with ``START``/``STOP`` marks as plain text and ``[start, end)`` ranges."""
    out: list[str] = []
    ranges: list[list[int]] = []
    length = 0
    start: int | None = None
    for ch in text:
        if ch == START:
            start = length
        elif ch == STOP:
            if start is not None:
                ranges.append([start, length])
            start = None
        else:
            out.append(ch)
            length += 1
    return "".join(out), ranges


def snippet(hit: Hit, query: str) -> tuple[str, list[list[int]]]:
    """The full-text headline when it marked a word; else a window around the query as typed
    (a trigram match: Chinese, or a part of a word)."""
    text, ranges = marked(hit.headline)
    if ranges:
        return text, ranges
    at = hit.text.lower().find(query.lower())
    if at < 0:
        return hit.text[:2 * SNIPPET_CONTEXT], []
    begin = max(0, at - SNIPPET_CONTEXT)
    end = min(len(hit.text), at + len(query) + SNIPPET_CONTEXT)
    return hit.text[begin:end], [[at - begin, at - begin + len(query)]]


class SearchService:
    """The caller's threads, messages and cards that match a query, best first.

    A ``Job`` too: ``start`` reads once whether the migration could build the trigram indexes
    (pg_trgm; docs/domain.md, "Search"), which decides the substring arm of every search."""

    name = "search"

    def __init__(self, db: Database) -> None:
        self.db = db
        self.trigrams: bool | None = None  # None: not read yet

    async def start(self) -> None:
        await self._trigrams()

    async def stop(self) -> None:
        return None

    async def _trigrams(self) -> bool:
        if self.trigrams is None:  # once (a command that never started the jobs reads it here)
            async with self.db.connection() as conn:
                self.trigrams = await store.has_trigram_indexes(conn)
        return self.trigrams

    async def search(self, who: Principal, q: str, cursor: str | None = None,
                     limit: int = 20) -> SearchPage:
        query = q.strip()
        if not query:
            raise Invalid.at(["query", "q"], "a search needs some text")
        if len(query) > MAX_QUERY_CHARS:
            raise Invalid.at(["query", "q"], f"a search is at most {MAX_QUERY_CHARS} characters")
        if not 1 <= limit <= 50:
            raise Invalid.at(["query", "limit"], "limit must be between 1 and 50")
        offset = decode_cursor(cursor)
        # trigrams narrow a query of three characters or more; a shorter one is left to the
        # full-text and Han indexes (with the trigram arm it would read all the user's rows)
        pattern = like_pattern(query) if len(query) >= 3 else None
        trigrams = await self._trigrams()
        async with self.db.transaction() as conn:
            hits = await store.search(conn, who.user_id, query, pattern,
                                      limit + 1, offset, CANDIDATES, han_phrase(query),
                                      trigrams, None if trigrams else word_prefixes(query),
                                      han_only(query))
        more = len(hits) > limit and offset + limit <= MAX_OFFSET
        results = []
        for hit in hits[:limit]:
            text, ranges = snippet(hit, query)
            results.append(SearchHit(kind=hit.kind, thread_id=hit.thread_id,
                                     thread_title=hit.thread_title, message_id=hit.message_id,
                                     snippet=text, highlights=ranges, rank=round(hit.rank, 6),
                                     created_at=rfc3339(hit.at)))
        return SearchPage(results=results,
                          next_cursor=encode_cursor(offset + limit) if more else None)
