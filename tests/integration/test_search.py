"""``GET /v1/search`` (issue 30, item 5) on a real database: English full text (stemmed),
Chinese through the Han phrase index, parts of words (trigrams where pg_trgm is, word beginnings
where it is not), cards' questions and options, answers, the caller's rows only, never a
secret, highlighted snippets, a cursor, refusals that change no row, and plans that read the
GIN indexes. The same tests run on a server with the contrib extensions (PG15 in
``MAXCLAW_TEST_DATABASE_URL``) and without (the embedded one): the indexes differ
(docs/domain.md, "Search"), the results asserted here do not."""

from __future__ import annotations

import json
from typing import Any

import asyncpg

from maxclaw.db.schema import SEARCH_TEXT, SEARCHABLE_MESSAGE
from maxclaw.search.service import han_only, han_phrase, like_pattern, word_prefixes
from maxclaw.search.store import SEARCH, has_trigram_indexes
from tests.cards import SECRET, post_card
from tests.conftest import Actor, Harness
from tests.integration.test_threads_manage import new_thread, table_counts

PLANTED = "zebra-4417-secret-answer"
FTS, TRGM, HAN = "messages_search_fts", "messages_search_trgm", "messages_search_han"


async def say(a: Actor, thread: str, body: str) -> int:
    resp = await a.user.post(f"/v1/threads/{thread}/messages", json={"body": body})
    assert resp.status_code == 201, resp.text
    return int(resp.json()["id"])


async def search(a: Actor, q: str, **params: Any) -> dict[str, Any]:
    resp = await a.user.get("/v1/search", params={"q": q, **params})
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def marked(hit: dict[str, Any]) -> list[str]:
    return [hit["snippet"][s:e] for s, e in hit["highlights"]]


async def test_english_chinese_cards_answers_and_isolation(harness: Harness) -> None:
    a = await harness.actor("max")
    b = await harness.actor("ann")
    tid = await new_thread(a, "Deployment checklist")
    deploy = await say(a, tid, "We are deploying the servers tonight, after the backup.")
    chinese = await say(a, tid, "我们今晚部署服务器，备份之后再说。")
    await say(b, await new_thread(b, "Ann's"), "Ann is deploying too")
    card = {"id": "q1", "kind": "choice", "question": "Which database migration path?",
            "options": [{"id": "a", "label": "Blue-green rollout"},
                        {"id": "b", "label": "灰度发布"}]}
    _, posted = await post_card(a.agent, tid, card, title="Rollout plan")
    cid = posted["components"][0]["id"]
    resp = await a.user.post(f"/v1/components/{cid}/answer", json={"selected": ["a"]})
    assert resp.status_code == 200, resp.text

    got = await search(a, "deploy")  # stemmed: deploying, Deployment
    kinds = {(h["kind"], h["message_id"]) for h in got["results"]}
    assert ("message", deploy) in kinds and ("thread", None) in kinds
    assert all(h["thread_id"] != "" for h in got["results"])
    hit = next(h for h in got["results"] if h["message_id"] == deploy)
    assert [w.lower() for w in marked(hit)] == ["deploying"]
    assert hit["thread_title"] == "Deployment checklist"
    assert "Ann" not in str(got)  # another user's rows are never searched

    got = await search(a, "部署")  # not a token of the english configuration: the Han phrase
    [hit] = got["results"]
    assert hit["message_id"] == chinese and marked(hit) == ["部署"]

    got = await search(a, "灰度发布")  # a card's option
    assert [h["kind"] for h in got["results"]] == ["card"]
    got = await search(a, "migration path")  # a card's question
    assert "card" in [h["kind"] for h in got["results"]]
    got = await search(a, "blue-green")  # the option as the answer (Max's message) and the card
    assert {h["kind"] for h in got["results"]} >= {"card"}


async def test_parts_of_words_with_and_without_trigrams(harness: Harness) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a, "Kubernetes upgrade")
    said = await say(a, tid, "The kubectl rollout finished; configuration reloaded.")
    await say(a, tid, "Nothing to see here.")
    async with harness.services.db.connection() as conn:
        trigrams = await has_trigram_indexes(conn)
    assert harness.services.search.trigrams == trigrams  # read once, at start
    # a word's beginning: found on both servers (trigrams, or the prefix arm without them)
    for q in ("kubect", "configura", "Kubern"):  # "configuration" is stemmed "configur"
        got = await search(a, q)
        assert got["results"], q
        assert all(q.lower() in h["snippet"].lower() for h in got["results"]), q
    hits = (await search(a, "kubect"))["results"]
    assert [h["message_id"] for h in hits] == [said]
    assert marked(hits[0]) == ["kubect"]  # the substring window marks what was typed
    assert {h["kind"] for h in (await search(a, "Kubern"))["results"]} == {"thread"}
    # the middle of a word: only trigrams find it; without them it matches nothing, never
    # something unrelated
    middle = (await search(a, "ubect"))["results"]
    assert [h["message_id"] for h in middle] == ([said] if trigrams else [])


async def test_a_secret_is_never_found(harness: Harness) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a)
    _, posted = await post_card(a.agent, tid, SECRET)
    cid = posted["components"][0]["id"]
    resp = await a.user.post(f"/v1/components/{cid}/answer", json={"text": PLANTED})
    assert resp.status_code == 200, resp.text
    # the agent repeats it: stored masked and sensitive
    resp = await a.agent.post(f"/v1/agent/threads/{tid}/messages",
                              json={"role": "assistant", "content": f"Using {PLANTED} now"})
    assert resp.status_code == 201, resp.text
    for q in (PLANTED, "zebra", "4417", "secret-answer", "Using"):
        got = await search(a, q)
        assert PLANTED not in str(got), q
    assert (await search(a, PLANTED))["results"] == []
    # nor stored: the documents search reads are NULL on a row that may hold a secret, and no
    # row's documents hold a word of it
    async with harness.services.db.connection() as conn:
        stored = await conn.fetch(
            "SELECT sensitive, search_fts IS NULL AS no_fts, search_han IS NULL AS no_han,"
            "       coalesce(search_fts::text, '') || coalesce(search_han::text, '') AS words"
            "  FROM messages WHERE user_id = $1::uuid", a.user_id)
    assert any(r["sensitive"] for r in stored)
    assert all(r["no_fts"] and r["no_han"] for r in stored if r["sensitive"])
    assert not any("zebra" in r["words"] or "4417" in r["words"] for r in stored)


def test_a_query_of_han_characters_alone() -> None:
    # only then is the Han phrase the one arm (a space or a letter keeps the others)
    assert han_only("部署") and han_only("部署服务器")
    assert not any(han_only(q) for q in ("部署 服务", "部署x", "x", "部署。", ""))


async def test_ranked_pages_with_a_cursor(harness: Harness) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a, "Notes")
    ids = [await say(a, tid, f"kettle note number {i}") for i in range(7)]
    best = await say(a, tid, "kettle kettle kettle: the kettle boils")
    seen: list[int] = []
    cursor = None
    pages = 0
    while True:
        got = await search(a, "kettle", limit=3, **({"cursor": cursor} if cursor else {}))
        seen += [h["message_id"] for h in got["results"]]
        pages += 1
        cursor = got["next_cursor"]
        if cursor is None:
            break
    assert pages == 3 and sorted(seen) == sorted([*ids, best]) and len(set(seen)) == len(seen)
    assert seen[0] == best  # the most relevant first
    ranks = [h["rank"] for h in (await search(a, "kettle", limit=50))["results"]]
    assert ranks == sorted(ranks, reverse=True)


async def test_bad_queries_are_422_naming_the_field_and_change_nothing(
        harness: Harness) -> None:
    a = await harness.actor("max")
    await say(a, await new_thread(a), "something")
    async with harness.services.db.connection() as conn:
        counts = await table_counts(conn)
    for params, field in (({}, "q"), ({"q": ""}, "q"), ({"q": "   "}, "q"),
                          ({"q": "x" * 201}, "q"),
                          ({"q": "ok", "cursor": "garbage"}, "cursor"),
                          ({"q": "ok", "limit": "0"}, "limit")):
        resp = await a.user.get("/v1/search", params=params)
        assert resp.status_code == 422, (params.keys(), resp.text[:200])
        body = resp.json()
        assert body["code"] == "invalid" and body["data"]["errors"][0]["loc"] == ["query", field]
    # 1 MiB of query: more than httpx puts in a URL, so straight to the app
    status, body = await raw_get(harness, a.user_token, b"q=" + b"x" * (1024 * 1024))
    assert status == 422 and body["data"]["errors"][0]["loc"] == ["query", "q"], body
    assert (await a.agent.get("/v1/search", params={"q": "x"})).status_code == 403
    async with harness.services.db.connection() as conn:
        assert await table_counts(conn) == counts


async def raw_get(harness: Harness, token: str, query: bytes) -> tuple[int, Any]:
    """``GET /v1/search?<query>`` through the ASGI interface itself."""
    sent: list[dict[str, Any]] = []
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "GET", "scheme": "http", "path": "/v1/search", "raw_path": b"/v1/search",
             "query_string": query, "root_path": "", "server": ("test", 80),
             "client": ("127.0.0.1", 1234),
             "headers": [(b"host", b"test"), (b"authorization", f"Bearer {token}".encode())]}

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await harness.app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return int(start["status"]), json.loads(body)


def pattern(q: str) -> str | None:
    return like_pattern(q) if len(q) >= 3 else None


async def _explain(conn: asyncpg.Connection, user_id: str, q: str, trigrams: bool) -> str:
    rows = await conn.fetch(f"EXPLAIN {SEARCH}", user_id, q, pattern(q), 21, 0, 500,
                            han_phrase(q), trigrams, None if trigrams else word_prefixes(q),
                            han_only(q))
    return "\n".join(r[0] for r in rows)


async def test_plans_read_the_gin_indexes(harness: Harness) -> None:
    a = await harness.actor("max")
    others = [(await harness.actor(f"other{i}")).user_id for i in range(20)]
    async with harness.services.db.transaction() as conn:
        # the caller's 5,000 messages among 45,000 of 20 other users (an index that leads with
        # user_id is only worth it when the user is a part of the table)
        for user_id, n in [(a.user_id, 5000)] + [(o, 2000) for o in others]:
            tid = await conn.fetchval(
                "INSERT INTO threads (user_id, kind, title) VALUES ($1::uuid, 'normal', 'bulk')"
                " RETURNING id::text", user_id)
            await conn.execute(
                "INSERT INTO messages (user_id, thread_id, role, body, delivered_at)"
                " SELECT $1::uuid, $2::uuid, 'user', 'message kw' || g || ' about topic '"
                "        || (g % 97) || CASE WHEN g % 50 = 0 THEN ' 部署服务器' ELSE '' END, now()"
                "   FROM generate_series(1, $3::int) g", user_id, tid, n)
    async with harness.services.db.connection() as conn:
        # what autovacuum does after a load: the GIN indexes' pending lists merged (a search
        # reads a pending list through, row by row, until then) and statistics taken
        await conn.execute("VACUUM ANALYZE messages")
        await conn.execute("VACUUM ANALYZE threads")
        trigrams = await has_trigram_indexes(conn)
    # with pg_trgm: English through full text and trigrams; without it: full text, and the Han
    # phrase index for the words' beginnings. A query of Han characters alone reads the Han
    # phrase index only (it finds all the others would: service.han_only), and a query with no
    # Han character never reads it for a phrase
    cases = ((("kw4242", (FTS, TRGM), (HAN,)), ("部署服务", (HAN,), (FTS, TRGM)),
              ("message kw42", (FTS, TRGM), (HAN,)), ("部署", (HAN,), (FTS, TRGM))) if trigrams
             else (("kw4242", (FTS, HAN), ()), ("部署服务", (HAN,), (FTS,)),
                   ("message kw42", (FTS, HAN), ()), ("部署", (HAN,), (FTS,))))
    # the statement as the service sends it, with enable_seqscan off: any Seq Scan left would
    # be a missing index; with it on, the planner still picks the GIN indexes at this size
    async with harness.services.db.connection() as conn:
        await conn.execute("SET plan_cache_mode = force_custom_plan")  # as store.search does
        for q, used, unused in cases:
            await conn.execute("SET enable_seqscan = off")
            plan = await _explain(conn, a.user_id, q, trigrams)
            assert all(i in plan for i in used) and "Seq Scan" not in plan, (q, plan)
            assert not any(i in plan for i in unused), (q, plan)
            assert trigrams or TRGM not in plan, (q, plan)
            await conn.execute("RESET enable_seqscan")
            plan = await _explain(conn, a.user_id, q, trigrams)
            assert all(i in plan for i in used), (q, plan)
            assert not any(i in plan for i in unused), (q, plan)
    # the index expression is the search's, letter for letter (one definition)
    assert SEARCH_TEXT in SEARCH and SEARCHABLE_MESSAGE in SEARCH
