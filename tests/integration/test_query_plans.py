"""The answer path's queries use indexes, and an answer sends an exact number of statements.

Plans are only meaningful with realistic row counts, so the database first gets 20,000 cards
(bulk-loaded the way ``bench.dataset`` loads them: assistant rows, tool rows, components and
carriers over 2,000 threads of 100 users), plus turns, push devices and outbox rows, then
``ANALYZE``. A real answer then goes through the HTTP API (auth included) while every statement
it sends is recorded with its arguments, and each one is EXPLAINed with those arguments:

1. as the planner chooses, with a custom and with a generic plan (asyncpg's prepared
   statements may switch to the generic one): no ``Seq Scan`` on any table that holds 1,000
   rows or more;
2. with ``enable_seqscan = off``: no ``Seq Scan`` anywhere. The planner still picks a
   sequential scan under that setting only when no index can serve the access, so this proves
   that every table the path reads — tiny ones included — is reached through an index, and a
   small table's sequential scan in (1) is the planner's choice, not a missing index.

The statements inside the turns trigger (which ``wake_thread`` fires) are not visible to a
client; they are EXPLAINed from their text, and the test checks that text is still the trigger's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from bench import counting, dataset

from maxclaw.app import create_app
from maxclaw.auth.service import Principal
from maxclaw.components import store as components_store
from maxclaw.db.database import connect
from maxclaw.errors import ComponentError
from tests.cards import CHOICE, SECRET, TEXT, ask_args, execute, new_thread, post_call, post_card
from tests.conftest import Actor, Harness, app_settings

CARDS = 20_000
BIG = 1_000  # a table with at least this many rows must never be read sequentially
# The turns trigger's own statements (0001_initial.py, maxclaw_turn_changed), NEW.thread_id → $1.
TRIGGER_STATEMENTS = {
    "FROM turns WHERE thread_id = NEW.thread_id AND status IN ('queued', 'running')":
        "SELECT CASE WHEN bool_or(status = 'running') THEN 'running' "
        "WHEN bool_or(status = 'queued') THEN 'queued' ELSE 'idle' END "
        "FROM turns WHERE thread_id = $1::uuid AND status IN ('queued', 'running')",
    "UPDATE threads SET turn_state = state\n     WHERE id = NEW.thread_id":
        "UPDATE threads SET turn_state = 'queued' WHERE id = $1::uuid "
        "AND turn_state IS DISTINCT FROM 'queued'",
}
EXTRA_ROWS = """
INSERT INTO turns (user_id, thread_id, status, finished_at)
SELECT user_id, id, 'done', now() FROM threads WHERE kind = 'normal';
INSERT INTO push_devices (user_id, platform, config)
SELECT id, 'log', jsonb_build_object('address', 'bench-' || name) FROM users
 WHERE name LIKE 'bulk\\_%';
INSERT INTO push_outbox (user_id, device_id, decision_id, kind, collapse_id, payload, status)
SELECT d.user_id, p.id, d.id, 'notify', 'ask:' || d.component_id, '{}'::jsonb, 'sent'
  FROM decisions d JOIN push_devices p ON p.user_id = d.user_id;
INSERT INTO component_audit (user_id, component_id, from_status, to_status, actor, via)
SELECT user_id, id, 'open', 'answered', 'max', 'card' FROM message_components
 WHERE status = 'answered';
ANALYZE;
"""


@pytest.fixture
async def counted(database_url: str) -> AsyncIterator[tuple[Harness, counting.StatementLog]]:
    """The app in-process on a database with realistic row counts, every statement logged."""
    await dataset.load(database_url, "plans", CARDS, due=False)
    conn = await connect(database_url)
    try:
        await conn.execute(EXTRA_ROWS)
    finally:
        await conn.close()
    with counting.installed() as log:
        app = create_app(app_settings(database_url))
        async with app.router.lifespan_context(app):
            client = Harness(app=app, services=app.state.services, client=None)  # type: ignore[arg-type]
            yield client, log


async def _answered_card(h: Harness, log: counting.StatementLog,
                         actor: Actor) -> tuple[str, list[str], list[tuple[Any, ...]]]:
    """Post a card (not watched: it gets a carrier), answer it over HTTP, return what the
    answer request sent: its component id, statements and their arguments."""
    tid = await new_thread(actor.user)
    call_id, _ = await post_card(actor.agent, tid)
    cid = f"{call_id}:q1"
    h.services.components._definitions.clear()  # as on a replica that did not post it: load
    with log.record() as queries:
        resp = await actor.user.post(f"/v1/components/{cid}/answer",
                                     json={"selected": ["keep"], "text": None})
        await counting.drain()
    assert resp.status_code == 200, resp.text
    return cid, list(queries), list(log.args)


def _scans(node: dict[str, Any]) -> list[tuple[str, str]]:
    """Every (node type, relation) in a JSON plan."""
    found = [(node["Node Type"], node.get("Relation Name", ""))]
    for child in node.get("Plans", []):
        found.extend(_scans(child))
    return found


async def _plan(conn: asyncpg.Connection, sql: str, args: tuple[Any, ...],
                mode: str) -> list[tuple[str, str]]:
    await conn.execute(f"SET plan_cache_mode = {mode}")
    rows = await conn.fetch("EXPLAIN (FORMAT JSON) " + sql, *args)
    plan = rows[0][0]
    plan = plan[0] if isinstance(plan, list) else plan
    return _scans(plan["Plan"])


async def _big_tables(conn: asyncpg.Connection) -> set[str]:
    rows = await conn.fetch("""
        SELECT relname FROM pg_class
         WHERE relkind = 'r' AND relnamespace = 'public'::regnamespace AND reltuples >= $1""",
                            BIG)
    return {r["relname"] for r in rows}


async def _assert_no_seq_scans(database_url: str, statements: list[tuple[str, tuple[Any, ...]]],
                               ) -> None:
    conn = await connect(database_url)
    try:
        big = await _big_tables(conn)
        assert {"messages", "message_components", "decisions", "threads", "turns",
                "push_outbox", "component_audit"} <= big, big  # the load made them big
        for sql, args in statements:
            for mode in ("force_custom_plan", "force_generic_plan"):
                seq = [rel for node, rel in await _plan(conn, sql, args, mode)
                       if node == "Seq Scan" and rel in big]
                assert not seq, f"{mode}: sequential scan of {seq} in\n{sql}"
            await conn.execute("SET enable_seqscan = off")
            seq = [rel for node, rel in await _plan(conn, sql, args, "auto")
                   if node == "Seq Scan"]
            await conn.execute("RESET enable_seqscan")
            assert not seq, f"no index can serve {seq} in\n{sql}"
    finally:
        await conn.close()


async def test_answer_path_uses_indexes_only(counted: tuple[Harness, counting.StatementLog],
                                             database_url: str) -> None:
    h, log = counted
    actor = await h.actor("max")
    await _answered_card(h, log, actor)  # warm-up: type introspection happens once
    _cid, queries, args = await _answered_card(h, log, actor)
    statements = [(q, a) for q, a in zip(queries, args, strict=True)
                  if counting.StatementLog.is_sql(q)]
    # the statements the answer request sent (the token is cached by then): load the
    # definition, CAS+mirror+audit, message+wake, settle the carrier, cancel its pending
    # pushes + enqueue the withdraw
    assert len(statements) == 5, "\n".join(q for q, _ in statements)
    conn = await connect(database_url)
    try:
        source = str(await conn.fetchval(
            "SELECT pg_get_functiondef('maxclaw_turn_changed()'::regprocedure)"))
        thread_id = await conn.fetchval("SELECT id FROM threads WHERE kind = 'normal' LIMIT 1")
    finally:
        await conn.close()
    for fragment in TRIGGER_STATEMENTS:
        assert fragment in source, f"the turns trigger changed: update TRIGGER_STATEMENTS\n{source}"
    statements += [(sql, (str(thread_id),)) for sql in TRIGGER_STATEMENTS.values()]
    await _assert_no_seq_scans(database_url, statements)


async def test_sweep_claims_through_the_due_index(database_url: str) -> None:
    await dataset.load(database_url, "plans", CARDS, due=False)
    await dataset.load(database_url, "due", 200, due=True)
    conn = await connect(database_url)
    try:
        for mode in ("force_custom_plan", "force_generic_plan"):
            await conn.execute(f"SET plan_cache_mode = {mode}")
            rows = await conn.fetch("EXPLAIN (FORMAT JSON) " + components_store.CLAIM_DUE,
                                    await conn.fetchval("SELECT now()"), 500)
            plan = rows[0][0]
            plan = plan[0] if isinstance(plan, list) else plan
            text = str(plan)
            assert "message_components_due" in text, f"{mode}: {text}"
            big_seq = [rel for node, rel in _scans(plan["Plan"])
                       if node == "Seq Scan" and rel in ("message_components", "messages",
                                                         "threads")]
            assert not big_seq, f"{mode}: {text}"
    finally:
        await conn.close()


async def _count(log: counting.StatementLog, call: Any) -> dict[str, int]:
    with log.record() as queries:
        await call()
        await counting.drain()
    return counting.StatementLog.kinds(list(queries))


async def test_statements_per_answer(counted: tuple[Harness, counting.StatementLog]) -> None:
    """The exact number of statements (= network round trips) one answer costs. A change that
    adds one fails here on purpose: update the number only with a measured reason."""
    h, log = counted
    actor = await h.actor("max")
    components = h.services.components
    user = Principal(user_id=actor.user_id, name="max", role="user")
    cids = []
    for _ in range(3):
        tid = await new_thread(actor.user)
        call_id, _ = await post_card(actor.agent, tid)
        cids.append(f"{call_id}:q1")
    await components.answer(user, cids[0], ["keep"], None, "card")  # warm-up

    answered = await _count(log, lambda: components.answer(user, cids[1], ["keep"], None,
                                                           "card"))
    # CAS+mirror+audit, message+wake, settle carrier, cancel pushes+withdraw: the card's
    # definition was cached when its post committed on this process (another replica reads it
    # first: one statement more, as test_answer_path_uses_indexes_only sends). Was 9 SQL + 1
    # pool reset before the CTE merges, the definition cache and the reset-free pool
    # (docs/benchmarks.md).
    assert answered == {"sql": 4, "begin_commit": 2, "pool_reset": 0}

    async def lose() -> None:
        with pytest.raises(ComponentError) as lost:
            await components.answer(user, cids[1], ["drop"], None, "card")
        assert lost.value.reason == "settled"

    # a surface that loses the race reads why and writes nothing: CAS (the definition is
    # cached now), status
    assert await _count(log, lose) == {"sql": 2, "begin_commit": 2, "pool_reset": 0}

    # a card posted while Max watches the thread has no carrier: no settle, no pushes
    tid = await new_thread(actor.user)
    await h.services.presence.focus("conn-1", actor.user_id, tid)
    call_id, _ = await post_card(actor.agent, tid)
    watched = await _count(log, lambda: components.answer(user, f"{call_id}:q1", ["keep"],
                                                          None, "card"))
    assert watched == {"sql": 2, "begin_commit": 2, "pool_reset": 0}

    # over HTTP: the token was looked up by this client's earlier requests and is cached
    http = await _count(log, lambda: actor.user.post(f"/v1/components/{cids[2]}/answer",
                                                     json={"selected": ["keep"]}))
    assert http == {"sql": 4, "begin_commit": 2, "pool_reset": 0}


async def test_statements_per_execute(counted: tuple[Harness, counting.StatementLog]) -> None:
    """What posting a card (``execute`` over HTTP) costs, whatever the number of questions:
    one read (thread, stored result, the call), then in one transaction presence, the tool
    row, the carriers, their pushes and the component rows. Was 8 SQL over three pool
    checkouts for one question, and two more per extra question."""
    h, log = counted
    actor = await h.actor("max")
    await post_card(actor.agent, await new_thread(actor.user))  # warm-up (token, types)
    for questions in ((CHOICE,), (CHOICE, TEXT, SECRET)):
        tid = await new_thread(actor.user)
        call_id = await post_call(actor.agent, tid, "ask_user_question", ask_args(*questions))

        async def run(tid: str = tid, call_id: str = call_id) -> None:
            resp = await execute(actor.agent, tid, call_id)
            assert resp.status_code == 200, resp.text

        assert await _count(log, run) == {"sql": 6, "begin_commit": 2, "pool_reset": 0}
        # a retry replays the stored result: the one read
        assert await _count(log, run) == {"sql": 1, "begin_commit": 0, "pool_reset": 0}


async def test_statements_per_round_trip(counted: tuple[Harness, counting.StatementLog]) -> None:
    """An agent's round trip over HTTP with ``"execute": true``: two requests, two
    transactions. The post: one read (thread, stored results, presence), the assistant row, the
    tool row, the carriers, their pushes, the component rows; the answer as above (the card's
    definition cached by the post). Posting and executing as two requests cost 4 + 8 statements
    (two reads more, one transaction more), and the answer one read more: 19 per round trip,
    then 14, now 15 with the secrets' echo check."""
    h, log = counted
    actor = await h.actor("max")

    async def post(tid: str, call_id: str, *questions: dict[str, Any]) -> dict[str, Any]:
        resp = await actor.agent.post(f"/v1/agent/threads/{tid}/messages", json={
            "role": "assistant", "content": None, "execute": True,
            "tool_calls": [{"id": call_id, "type": "function", "function": {
                "name": "ask_user_question", "arguments": ask_args(*questions)}}]})
        assert resp.status_code == 201, resp.text
        assert resp.json()["results"][0]["status"] == 200
        return dict(resp.json())

    await post(await new_thread(actor.user), "rt_warm", CHOICE)  # warm-up (token, types)
    for n, questions in enumerate(((CHOICE,), (CHOICE, TEXT, SECRET))):
        tid, call_id = await new_thread(actor.user), f"rt_{n}"

        async def posted(tid: str = tid, call_id: str = call_id,
                         questions: tuple[dict[str, Any], ...] = questions) -> None:
            await post(tid, call_id, *questions)

        # 7 since the secrets' echo check (issue 18): one indexed read of the thread's live
        # secret boxes before an agent's row is written (message_secrets_thread_answers);
        # folding it into the first read would win it back
        assert await _count(log, posted) == {"sql": 7, "begin_commit": 2, "pool_reset": 0}
        # a retried post writes nothing: the read, the call's row, execute's replay read
        assert await _count(log, posted) == {"sql": 3, "begin_commit": 2, "pool_reset": 0}

        async def answered(call_id: str = call_id) -> None:
            resp = await actor.user.post(f"/v1/components/{call_id}:q1/answer",
                                         json={"selected": ["keep"]})
            assert resp.status_code == 200, resp.text

        assert await _count(log, answered) == {"sql": 4, "begin_commit": 2, "pool_reset": 0}
