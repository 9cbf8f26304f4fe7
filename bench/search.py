"""``GET /v1/search`` for a user with 100,000 messages (issue 30, item 5): p50/p99 per query
kind, through ``SearchService.search`` (pool checkout, the statement, snippets) in-process.

The database is a fresh one (migrated to head) on the server given: the user ``searcher`` with
100,000 messages over 50 threads (English from a Zipf-distributed vocabulary of 5,000 words,
one message in 20 with a Chinese sentence, one in 100 a card), plus 100,000 messages of 20
other users (the indexes lead with ``user_id``), then ``VACUUM ANALYZE`` (what autovacuum does
after a load: the GIN pending lists merged). Each query kind runs ``--repeats`` times, cycling
over its terms. The indexes are those the server allows (docs/domain.md, "Search"): with
pg_trgm and btree_gin (a packaged server, PG15 here) or without (``--embedded DIR``: the
embedded PostgreSQL ``make run`` starts, in DIR); ``trigram_indexes`` in the output says which.

    flock /tmp/maxclaw-heavy.lock python -m bench.search --server-url postgresql://…/postgres
    flock /tmp/maxclaw-heavy.lock python -m bench.search --embedded /tmp/bench-embedded
    python -m bench.search --reuse bench_search_…   # the searches again on a kept database
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg

from bench.stats import summary_ms
from maxclaw.auth.service import Principal
from maxclaw.db import migrate
from maxclaw.db.database import Database
from maxclaw.db.urls import plain_url, with_database
from maxclaw.search.service import SearchService

MESSAGES = 100_000
OTHER_USERS, OTHER_MESSAGES = 20, 100_000
THREADS = 50
VOCABULARY = 5_000
CHINESE = ["我们今晚部署服务器", "备份之后再迁移数据库", "灰度发布需要两天", "请检查日志里的错误",
           "明天下午开会讨论预算", "这个接口的延迟太高了"]


def vocabulary(rng: random.Random) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words: set[str] = set()
    while len(words) < VOCABULARY:
        words.add("".join(rng.choice(letters) for _ in range(rng.randint(4, 9))))
    return sorted(words)


def zipf_weights(n: int) -> list[float]:
    return [1 / (rank + 1) for rank in range(n)]


def bodies(rng: random.Random, words: list[str], n: int) -> list[str]:
    weights = zipf_weights(len(words))
    out = []
    for i in range(n):
        text = " ".join(rng.choices(words, weights, k=rng.randint(6, 30)))
        if i % 20 == 0:
            text += " " + rng.choice(CHINESE)
        out.append(text)
    return out


def card_calls(i: int, words: list[str]) -> str:
    return json.dumps([{"id": f"call_{i}", "name": "ask_user_question", "arguments": {
        "title": f"{words[i % 300]} plan", "questions": [{
            "id": "q1", "kind": "choice", "question": f"Which {words[(i * 7) % 900]} path?",
            "options": [{"id": "a", "label": words[(i * 13) % 2000]},
                        {"id": "b", "label": "灰度发布"}]}]}}])


async def load(conn: asyncpg.Connection, rng: random.Random, words: list[str],
               messages: int, others: int) -> str:
    users = [str(uuid.uuid4()) for _ in range(1 + OTHER_USERS)]
    await conn.executemany("INSERT INTO users (id, name) VALUES ($1::uuid, $2)",
                           [(u, f"user{i}") for i, u in enumerate(users)])
    me = users[0]
    for user_id, n in [(me, messages)] + [(u, others // OTHER_USERS) for u in users[1:]]:
        threads = [str(uuid.uuid4()) for _ in range(THREADS if user_id == me else 5)]
        await conn.executemany(
            "INSERT INTO threads (id, user_id, kind, title) VALUES ($1::uuid, $2::uuid,"
            " 'normal', $3)",
            [(t, user_id, " ".join(rng.choices(words[:500], k=3))) for t in threads])
        texts = bodies(rng, words, n)
        records = []
        for i, text in enumerate(texts):
            card = i % 100 == 99
            records.append((user_id, threads[i % len(threads)],
                            "assistant" if card or i % 2 else "user", text,
                            card_calls(i, words) if card else None))
        await conn.executemany(
            "INSERT INTO messages (user_id, thread_id, role, body, tool_calls, delivered_at)"
            " VALUES ($1::uuid, $2::uuid, $3, $4, $5::jsonb, now())", records)
    return me


QUERIES = {
    # a word of the vocabulary's tail (a few dozen messages), of its head (thousands)
    "english_rare": lambda w: w[4000:4020],
    "english_common": lambda w: w[:10],
    "english_two_words": lambda w: [f"{a} {b}" for a, b in zip(w[50:70], w[200:220],
                                                                strict=True)],
    "chinese_4_chars": lambda w: ["部署服务", "迁移数据", "灰度发布", "检查日志", "延迟太高"],
    "chinese_2_chars": lambda w: ["部署", "预算", "日志", "接口"],
    # the first five letters of words of 7 to 9 (trigrams: a substring; without: a prefix)
    "word_beginning": lambda w: [x[:5] for x in w[100:400] if len(x) >= 7][:20],
}


async def run(server_url: str, repeats: int, seed: int, messages: int = MESSAGES,
              others: int = OTHER_MESSAGES, keep: bool = False,
              reuse: str | None = None) -> dict[str, Any]:
    name = reuse or f"bench_search_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(plain_url(server_url))
    if reuse is None:
        await admin.execute(f'CREATE DATABASE "{name}"')
    url = with_database(server_url, name)
    keep = keep or reuse is not None
    try:
        await asyncio.to_thread(migrate.upgrade, url)
        rng = random.Random(seed)
        words = vocabulary(rng)
        conn = await asyncpg.connect(plain_url(url))
        t0 = time.perf_counter()
        if reuse is None:
            me = await load(conn, rng, words, messages, others)
        else:  # a database an earlier run kept: the same rows (same seed), migrated to head
            me = await conn.fetchval("SELECT id::text FROM users WHERE name = 'user0'")
        loaded_s = time.perf_counter() - t0
        await conn.execute("VACUUM ANALYZE messages")
        await conn.execute("VACUUM ANALYZE threads")
        sizes = {r["indexname"]: r["size"] for r in await conn.fetch(
            "SELECT indexname, pg_size_pretty(pg_relation_size(indexname::regclass)) AS size"
            " FROM pg_indexes WHERE indexname LIKE '%search%'")}
        await conn.close()

        db = Database(url, min_size=1, max_size=2)
        await db.open()
        search = SearchService(db)
        await search.start()
        who = Principal(user_id=me, name="user0", role="user")
        results: dict[str, Any] = {}
        everything: list[float] = []
        for kind, terms_of in QUERIES.items():
            terms = terms_of(words)
            await search.search(who, terms[0])  # warm the plan cache
            times, hits = [], []
            for i in range(repeats):
                q = terms[i % len(terms)]
                t0 = time.perf_counter()
                page = await search.search(who, q)
                times.append(time.perf_counter() - t0)
                hits.append(len(page.results))
            everything += times
            summary = summary_ms(times)
            summary.pop("quantiles_ms", None)
            results[kind] = {**summary, "mean_hits_per_page": round(sum(hits) / len(hits), 1)}
        await db.close()
        overall = summary_ms(everything)
        overall.pop("quantiles_ms", None)
        return {"trigram_indexes": search.trigrams,
                "messages_of_user": messages, "messages_of_others": others,
                "load_s": round(loaded_s, 1), "index_sizes": sizes, "per_kind": results,
                "overall": overall, **({"kept_database": name} if keep else {})}
    finally:
        if not keep:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server-url", default="postgresql://postgres@127.0.0.1:5432/postgres",
                        help="a PostgreSQL server's URL (a fresh database is made on it)")
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--seed", type=int, default=30)
    parser.add_argument("--messages", type=int, default=MESSAGES, help="the user's messages")
    parser.add_argument("--others", type=int, default=OTHER_MESSAGES,
                        help="messages of the other users, all told")
    parser.add_argument("--keep", action="store_true", help="keep the database (to EXPLAIN)")
    parser.add_argument("--reuse", metavar="NAME",
                        help="search a database an earlier --keep run left (migrated to head"
                             " first; no load; kept)")
    parser.add_argument("--embedded", metavar="DIR",
                        help="start the embedded PostgreSQL in DIR and use it (no contrib)")
    args = parser.parse_args()
    server_url, embedded = args.server_url, None
    if args.embedded:
        from maxclaw.db.embedded import EmbeddedPostgres

        embedded = EmbeddedPostgres(Path(args.embedded))
        server_url = embedded.start()
    try:
        print(json.dumps(asyncio.run(run(server_url, args.repeats, args.seed, args.messages,
                                         args.others, args.keep, args.reuse)), indent=2))
    finally:
        if embedded is not None:
            embedded.stop()


if __name__ == "__main__":
    main()
