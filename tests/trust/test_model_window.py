"""Finding 2: claim and history are bounded (the model window, a cap and a cursor).

Handing over a whole thread (a claim) or reading it all (``history``) would put one agent's thread
of thousands of rows (or of 1 MiB rows) through the event loop every other user shares. So both
hand over the model window — the newest rows up to ``model_window_rows`` and
``model_window_bytes``, never starting between a tool call and its results — and
``next_before_id``, with which ``history`` reads the window before it, down to the first row.
The window's query reads no more rows than its cap (EXPLAIN ANALYZE, on the thread index).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from maxclaw.app import create_app
from maxclaw.turns import store as turn_store
from tests.conftest import Actor, Harness, app_settings

GROUPS = 1000  # four rows each: 4,000 rows in one thread
ROWS_CAP = 120
BYTES_CAP = 256 * 1024
BIG_ROW = 60_000

# One group: an input, an assistant row with one call, an input written while the tool ran,
# then the call's result (so the model reads u, a, t, w: the result follows its call).
BULK_GROUPS = """
INSERT INTO messages (user_id, thread_id, role, body, tool_calls, tool_call_id, content)
SELECT $1::uuid, $2::uuid, r.role, r.body, r.tool_calls, r.tool_call_id, r.content
  FROM generate_series(1, $3) g, LATERAL (VALUES
       (1, 'user', 'u' || g, NULL::jsonb, NULL, NULL::jsonb),
       (2, 'assistant', 'a' || g, jsonb_build_array(jsonb_build_object(
            'id', 'c' || g, 'name', 'shell', 'arguments', '{}'::jsonb)), NULL, NULL),
       (3, 'user', 'w' || g, NULL, NULL, NULL),
       (4, 'tool', NULL, NULL, 'c' || g, to_jsonb('t' || g))) r(ord, role, body, tool_calls,
                                                                tool_call_id, content)
 ORDER BY g, r.ord
"""
BULK_BIG = """
INSERT INTO messages (user_id, thread_id, role, body)
SELECT $1::uuid, $2::uuid, 'user', 'b' || g || ' ' || repeat('x', $4)
  FROM generate_series(1, $3) g ORDER BY g
"""

OTHER_THREADS = """
WITH t AS (INSERT INTO threads (user_id, kind, title)
           SELECT $1::uuid, 'normal', 'other ' || g FROM generate_series(1, 500) g RETURNING id)
INSERT INTO messages (user_id, thread_id, role, body)
SELECT $1::uuid, t.id, 'assistant', 'other ' || g FROM t, generate_series(1, 40) g
"""


def expected_groups(n: int) -> list[str]:
    return [f"{k}{g}" for g in range(1, n + 1) for k in "uatw"]


@pytest.fixture
async def capped(database_url: str) -> AsyncIterator[Harness]:
    """The app in-process with a small model window, so a test thread overflows it fast."""
    app = create_app(app_settings(database_url, model_window_rows=ROWS_CAP,
                                  model_window_bytes=BYTES_CAP))
    async with app.router.lifespan_context(app):
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")
        yield Harness(app=app, services=app.state.services, client=client)
        await client.aclose()


async def new_thread(actor: Actor) -> str:
    resp = await actor.user.post("/v1/threads", json={"title": "huge", "kind": "normal"})
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


async def fill(harness: Harness, actor: Actor, thread_id: str, sql: str, *args: Any) -> None:
    async with harness.services.db.transaction() as conn:
        await conn.execute(sql, actor.user_id, thread_id, *args)
    # the wake-up: the last input goes through the API, which queues the turn
    resp = await actor.user.post(f"/v1/threads/{thread_id}/messages", json={"body": "last"})
    assert resp.status_code == 201, resp.text


def text_of(message: dict[str, Any]) -> str:
    return str(message.get("content") or "").split(" ")[0]


def assert_whole_groups(messages: list[dict[str, Any]]) -> None:
    """Every tool message follows an assistant message carrying its call, in this window."""
    called: set[str] = set()
    for m in messages:
        if m["role"] == "assistant":
            called |= {c["id"] for c in m.get("tool_calls") or []}
        if m["role"] == "tool":
            assert m["tool_call_id"] in called, f"{m['tool_call_id']} cut from its call"


async def claim(actor: Actor) -> dict[str, Any]:
    resp = await actor.agent.post("/v1/agent/turns/claim", json={"wait_s": 0})
    assert resp.status_code == 200, resp.text
    body: dict[str, Any] = resp.json()
    return body


async def older_pages(actor: Actor, thread_id: str, before_id: int | None,
                      ) -> list[list[dict[str, Any]]]:
    """Every history page from ``before_id`` down to the oldest, newest first."""
    pages = []
    while before_id is not None:
        resp = await actor.agent.get(f"/v1/agent/threads/{thread_id}/history",
                                     params={"before_id": before_id})
        assert resp.status_code == 200, resp.text
        page = resp.json()
        pages.append(page["messages"])
        assert page["next_before_id"] is None or page["next_before_id"] < before_id
        before_id = page["next_before_id"]
    return pages


async def test_claim_of_a_huge_thread_hands_the_window_and_a_cursor(capped: Harness) -> None:
    max_ = await capped.actor("max")
    tid = await new_thread(max_)
    await fill(capped, max_, tid, BULK_GROUPS, GROUPS)

    claimed = await claim(max_)
    window = claimed["messages"]
    assert 0 < len(window) <= ROWS_CAP
    assert text_of(window[-1]) == "last"  # the window is the newest end of the thread
    assert_whole_groups(window)
    assert claimed["next_before_id"] is not None

    # every input up to the head counts as delivered (the cursor reaches the older ones), so
    # finishing queues no turn for rows no window shows
    finished = await max_.agent.post(f"/v1/agent/turns/{claimed['turn']['id']}/finish")
    assert finished.status_code == 200 and finished.json()["requeued"] is False

    pages = await older_pages(max_, tid, claimed["next_before_id"])
    for page in pages:
        assert len(page) <= ROWS_CAP
        assert_whole_groups(page)
    seen = [text_of(m) for page in reversed(pages) for m in page] + [text_of(m) for m in window]
    # every row exactly once, in the thread's order
    assert seen == [*expected_groups(GROUPS), "last"]

    # history without a cursor is the same newest window
    newest = (await max_.agent.get(f"/v1/agent/threads/{tid}/history")).json()
    assert newest["messages"] == window and newest["next_before_id"] == claimed["next_before_id"]


async def test_the_window_ends_at_its_byte_budget(capped: Harness) -> None:
    max_ = await capped.actor("max")
    tid = await new_thread(max_)
    await fill(capped, max_, tid, BULK_BIG, 40, BIG_ROW)

    claimed = await claim(max_)
    window = claimed["messages"]
    size = sum(len(m["content"].encode()) for m in window)
    # rows are taken while the newer ones hold less than the budget: at most one row over it
    assert size < BYTES_CAP + BIG_ROW + 100, size
    assert len(window) < 10
    pages = await older_pages(max_, tid, claimed["next_before_id"])
    for page in pages:
        assert sum(len(m["content"].encode()) for m in page) < BYTES_CAP + BIG_ROW + 100
    seen = [text_of(m) for page in reversed(pages) for m in page] + [text_of(m) for m in window]
    assert seen == [f"b{g}" for g in range(1, 41)] + ["last"]


async def test_history_reads_only_what_was_handed_and_refuses_a_bad_cursor(
        capped: Harness) -> None:
    max_ = await capped.actor("max")
    tid = await new_thread(max_)
    await fill(capped, max_, tid, BULK_GROUPS, 10)
    before = (await max_.agent.get(f"/v1/agent/threads/{tid}/history")).json()
    # nothing was delivered yet: the model has been handed only its own rows and results
    assert [text_of(m) for m in before["messages"]][:3] == ["a1", "t1", "a2"]
    for bad in ("0", "-1", "x", str(2**63)):
        resp = await max_.agent.get(f"/v1/agent/threads/{tid}/history",
                                    params={"before_id": bad})
        assert resp.status_code == 422, (bad, resp.text)
        assert resp.json()["code"] == "invalid"


async def test_the_window_query_reads_no_more_than_its_cap(capped: Harness) -> None:
    """EXPLAIN ANALYZE of the window's statement on a thread of 4,000 rows: it walks the
    thread index backwards and stops at the cap, wherever the cursor points."""
    max_, eve = await capped.actor("max"), await capped.actor("eve")
    tid = await new_thread(max_)
    await fill(capped, max_, tid, BULK_GROUPS, GROUPS)
    async with capped.services.db.transaction() as conn:
        await conn.execute(turn_store.WINDOW_PLAN)
        # other users' threads, written after it, so the planner sees a table of many threads
        # (and a walk of the primary key from the newest row would read all of theirs first)
        await conn.execute(OTHER_THREADS, eve.user_id)
        await conn.execute("ANALYZE")
        middle = await conn.fetchval(
            "SELECT id FROM messages WHERE thread_id = $1::uuid ORDER BY id OFFSET 2000 LIMIT 1",
            tid)
        for before_id in (None, middle):
            raw = await conn.fetchval("EXPLAIN (ANALYZE, FORMAT JSON) " + turn_store.MODEL_WINDOW,
                                      max_.user_id, tid, before_id, ROWS_CAP, BYTES_CAP)
            plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
            scans = list(nodes(plan, "Relation Name"))
            # one index scan (of one partition when the table is partitioned by user)
            assert [(s["Node Type"], s.get("Index Name", "").split("_p")[0],
                     s.get("Scan Direction")) for s in scans] == [
                ("Index Scan", "messages_thread_id", "Backward")], [
                (s["Node Type"], s.get("Index Name")) for s in scans]
            # the scan stopped at the cap: the thread's other rows were never read
            assert scans[0]["Actual Rows"] + scans[0].get("Rows Removed by Filter", 0) \
                <= ROWS_CAP, scans


async def test_the_window_query_is_never_jit_compiled(capped: Harness) -> None:
    """The window's plan settings disable nodes by costing them at 10^10, which put the plan
    past every JIT threshold: a server with JIT compiled this three-row query on every claim
    (150-200 ms of the answer → claim wake-up). Under WINDOW_PLAN it runs without JIT; where the
    server can JIT, the same settings without ``jit = off`` are shown to compile it, so this
    test fails if the line goes."""
    max_ = await capped.actor("max")
    tid = await new_thread(max_)
    await fill(capped, max_, tid, BULK_GROUPS, 1)
    args = (max_.user_id, tid, None, ROWS_CAP, BYTES_CAP)
    explain = "EXPLAIN (ANALYZE, FORMAT JSON) " + turn_store.MODEL_WINDOW
    async with capped.services.db.transaction() as conn:
        can_jit = bool(await conn.fetchval("SELECT pg_jit_available()"))
        await conn.execute(turn_store.WINDOW_PLAN)
        assert await conn.fetchval("SHOW jit") == "off"
        raw = await conn.fetchval(explain, *args)
        assert "JIT" not in (json.loads(raw) if isinstance(raw, str) else raw)[0]
        await conn.execute("SET LOCAL jit = on")  # the settings as they were before
        raw = await conn.fetchval(explain, *args)
        assert ("JIT" in (json.loads(raw) if isinstance(raw, str) else raw)[0]) == can_jit


def nodes(plan: dict[str, Any], key: str) -> Any:
    if key in plan:
        yield plan
    for child in plan.get("Plans", ()):
        yield from nodes(child, key)
