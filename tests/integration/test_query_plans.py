"""The answer path's queries use indexes, and an answer sends an exact number of statements.

Plans are only meaningful with realistic row counts, so the database first gets 20,000 cards
(bulk-loaded the way ``bench.dataset`` loads them: assistant rows, tool rows, components and
carriers over 2,000 threads of 100 users), plus turns, push devices and outbox rows, then
``ANALYZE`` (the card load is done once per server into a template, ``plans_template``; each
test's ``database_url`` here is its own clone of it, statistics included, as every other test's
is a clone of the migrated template). A real answer then goes through the HTTP API (auth
included) while every statement it sends is recorded with its arguments, and each one is
EXPLAINed with those arguments:

1. as the planner chooses, with a custom and with a generic plan (asyncpg's prepared
   statements switch to the generic one after five runs; ``tests.plans`` shows it through a
   prepared statement, as a plain EXPLAIN with bound values would only show the custom one):
   no ``Seq Scan`` on any table that holds 1,000 rows or more;
2. with ``enable_seqscan = off``: no ``Seq Scan`` anywhere. The planner still picks a
   sequential scan under that setting only when no index can serve the access, so this proves
   that every table the path reads — tiny ones included — is reached through an index, and a
   small table's sequential scan in (1) is the planner's choice, not a missing index.

The statements inside the triggers the path fires (the turns trigger on the wake-up, the
open-cards trigger on the card's settlement) are not visible to a client; they are EXPLAINed
from their text, and the test checks that text is still the trigger's.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from bench import counting, dataset

from maxclaw.app import create_app
from maxclaw.auth.service import Principal
from maxclaw.components import sweep_store
from maxclaw.db.database import connect
from maxclaw.errors import ComponentError
from maxclaw.prefs import store as prefs_store
from tests import pg, plans, pooler
from tests.cards import CHOICE, SECRET, TEXT, ask_args, execute, new_thread, post_call, post_card
from tests.conftest import Actor, Harness, app_settings, cloned_database

CARDS = 20_000
BUSY = "bulk_1"  # the load spreads its cards over bulk_1 … bulk_100 (bench.dataset.USERS)
BIG = 1_000  # a table with at least this many rows must never be read sequentially
# The statements of the triggers a round trip fires, which a client never sees, by function:
# fragment of the function's source -> the statement EXPLAINed in its place, NEW.user_id -> $1
# and NEW.thread_id -> $2. maxclaw_turn_changed (0006_user_keys) runs on the answer's wake-up;
# maxclaw_open_cards_changed (0007_open_cards_key) when a card opens (the post) and settles
# (the answer). The latter once looked the thread up by id alone: a scan of every thread.
TRIGGER_STATEMENTS = {
    "maxclaw_turn_changed()": {
        "FROM turns WHERE user_id = NEW.user_id AND thread_id = NEW.thread_id\n"
        "                   AND status IN ('queued', 'running')":
            "SELECT CASE WHEN bool_or(status = 'running') THEN 'running' "
            "WHEN bool_or(status = 'queued') THEN 'queued' ELSE 'idle' END "
            "FROM turns WHERE user_id = $1::uuid AND thread_id = $2::uuid "
            "AND status IN ('queued', 'running')",
        "UPDATE threads SET turn_state = state\n"
        "     WHERE user_id = NEW.user_id AND id = NEW.thread_id":
            "UPDATE threads SET turn_state = 'queued' WHERE user_id = $1::uuid AND id = $2::uuid "
            "AND turn_state IS DISTINCT FROM 'queued'",
    },
    "maxclaw_open_cards_changed()": {
        "UPDATE threads SET open_cards = greatest(open_cards + delta, 0)\n"
        "         WHERE user_id = coalesce(NEW.user_id, OLD.user_id)"
        " AND id = coalesce(NEW.thread_id, OLD.thread_id);":
            "UPDATE threads SET open_cards = greatest(open_cards + 1, 0)"
            " WHERE user_id = coalesce($1::uuid, NULL) AND id = coalesce($2::uuid, NULL)",
    },
    # the decisions triggers call it on the post and on the answer, one user at a time: its
    # check by the user's key (0028_live_activity_check), then for a user with a Live Activity
    # the queueing half, which keeps its generic plans (0026_live_activity_per_user): those
    # must read by the user's key, and on the partitioned schema one partition (an array or a
    # join there read them all)
    "maxclaw_refresh_live_activities(uuid[])": {
        "WHERE d.user_id = u AND d.platform = 'apns'":
            "SELECT 1 FROM push_devices AS d WHERE d.user_id = $1::uuid AND d.platform = 'apns'"
            " AND (d.config ? 'live_activity_token' OR d.config ? 'live_activity_start_token')",
        "RETURN maxclaw_queue_live_activities(shown);": "",
    },
    "maxclaw_queue_live_activities(uuid[])": {
        "SET plan_cache_mode TO 'force_generic_plan'": "",
        "FROM decisions AS x\n             WHERE x.user_id = u AND x.status = 'open'":
            "SELECT x.id, row_number() OVER (ORDER BY x.id DESC) FROM decisions AS x"
            " WHERE x.user_id = $1::uuid AND x.status = 'open'",
        "WHERE p.event IS NOT NULL AND o.user_id = u AND o.decision_id IS NULL\n"
        "               AND o.device_id = p.device_id AND o.kind = 'activity'":
            "SELECT o.id FROM push_outbox AS o WHERE o.user_id = $1::uuid"
            " AND o.decision_id IS NULL AND o.device_id IN (SELECT d.id FROM push_devices AS d"
            " WHERE d.user_id = $1::uuid) AND o.kind = 'activity' AND o.status = 'pending'",
        "WHERE d.user_id = u AND d.id = i.device_id":
            "SELECT d.config FROM push_devices AS d WHERE d.user_id = $1::uuid"
            " AND d.id = (SELECT max(v.id) FROM push_devices AS v WHERE v.user_id = $1::uuid)",
    },
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


async def _load_plans(url: str) -> None:
    await dataset.load(url, "plans", CARDS, due=False)
    # the other tables' rows too, in the template: run per test they were ~1.6 s of each
    # `counted` setup (ANALYZE of the whole loaded database included); a clone keeps the rows
    # and their statistics
    conn = await connect(url)
    try:
        await conn.execute(EXTRA_ROWS)
    finally:
        await conn.close()


@pytest.fixture(scope="session")
def plans_template(pg_server: str, pg_template: str) -> str:
    """The migrated template plus ``dataset.load`` of CARDS cards and EXTRA_ROWS (then ANALYZE),
    built once per server: the load took 4-5 s of every test here."""
    return asyncio.run(pg.ensure_derived_template(
        pg_server, pg_template, f"plans{CARDS}", _load_plans,
        [Path(dataset.__file__), Path(__file__)]))


@pytest.fixture
def database_url(pg_server: str, plans_template: str,
                 pgbouncer: pooler.PgBouncer | None) -> Iterator[str]:
    """This test's own database, already holding the load of CARDS cards (a clone of
    ``plans_template``; it overrides the migrated-only ``database_url`` of tests/conftest.py)."""
    yield from cloned_database(pg_server, plans_template, pgbouncer)


@pytest.fixture
async def counted(database_url: str) -> AsyncIterator[tuple[Harness, counting.StatementLog]]:
    """The app in-process on a database with realistic row counts, every statement logged;
    as it ships (hints in the commit: MAXCLAW_HINTS_AFTER_COMMIT adds a BEGIN and a COMMIT to
    each of the round trip's writes, docs/benchmarks.md), whatever the environment says."""
    with counting.installed() as log:
        app = create_app(app_settings(database_url, hints_after_commit=False))
        async with app.router.lifespan_context(app):
            client = Harness(app=app, services=app.state.services, client=None)  # type: ignore[arg-type]
            yield client, log


Statement = tuple[str, tuple[Any, ...]]


async def _round_trip(h: Harness, log: counting.StatementLog,
                      actor: Actor) -> tuple[list[Statement], list[Statement]]:
    """Post a card with ``"execute": true`` (not watched: it gets a carrier) and answer it over
    HTTP; returns the SQL statements each request sent, with their arguments."""
    tid = await new_thread(actor.user)
    call_id = f"plan_{uuid.uuid4().hex[:12]}"

    async def sent(request: Any) -> list[Statement]:
        with log.record() as queries:
            resp = await request
            await counting.drain()
        assert resp.status_code in (200, 201), resp.text
        return [(q, a) for q, a in zip(queries, log.args, strict=True)
                if counting.StatementLog.is_sql(q)]

    posted = await sent(actor.agent.post(f"/v1/agent/threads/{tid}/messages", json={
        "role": "assistant", "content": None, "execute": True,
        "tool_calls": [{"id": call_id, "type": "function", "function": {
            "name": "ask_user_question", "arguments": ask_args(CHOICE)}}]}))
    h.services.components._definitions.clear()  # as on a replica that did not post it: load
    answered = await sent(actor.user.post(f"/v1/components/{call_id}:q1/answer",
                                          json={"selected": ["keep"], "text": None}))
    return posted, answered


def _scans(node: dict[str, Any]) -> list[dict[str, Any]]:
    """Every node of a JSON plan."""
    found = [node]
    for child in node.get("Plans", []):
        found.extend(_scans(child))
    return found


async def _plan(conn: asyncpg.Connection, sql: str, args: tuple[Any, ...],
                mode: str) -> list[dict[str, Any]]:
    """Every node of the plan ``mode`` gives (``tests.plans``: a generic plan is the prepared
    statement's, as the service's statements run after their fifth call)."""
    rows = await plans.explain(conn, sql, args, mode)
    plan = plans.root(rows)
    return _scans(plan["Plan"])


async def _big_tables(conn: asyncpg.Connection) -> tuple[set[str], set[str]]:
    """The relations (tables, or partitions on a partitioned schema) with at least BIG rows,
    and the tables whose rows (over all their partitions) reach BIG."""
    rows = await conn.fetch("""
        SELECT c.relname, coalesce(p.relname, c.relname) AS tbl, c.reltuples
          FROM pg_class c
          LEFT JOIN pg_inherits i ON i.inhrelid = c.oid
          LEFT JOIN pg_class p ON p.oid = i.inhparent
         WHERE c.relkind = 'r' AND c.relnamespace = 'public'::regnamespace""")
    per_table: dict[str, float] = {}
    for r in rows:
        per_table[r["tbl"]] = per_table.get(r["tbl"], 0) + max(r["reltuples"], 0)
    return ({r["relname"] for r in rows if r["reltuples"] >= BIG},
            {t for t, n in per_table.items() if n >= BIG})


# Sub-plans that run only on a path the round trip does not take, by the filter the planner
# gives them. POST_CARDS's carrier fallback: only when ``ON CONFLICT DO NOTHING`` found the
# carrier already there does it look the carrier up by dedupe key; with a user the statistics
# put at one row, the planner ties the key's own index with the primary key's user prefix.
RARE_FALLBACKS = {"(dedupe_key = ('ask:'::text || x_3.id))"}


async def _index_columns(conn: asyncpg.Connection) -> dict[str, list[str]]:
    """The columns of each index that holds BIG entries or more, in key order (expression
    indexes left out; a small partial index, as the pending pushes', may well be read whole)."""
    rows = await conn.fetch("""
        SELECT c.relname AS index, array_agg(a.attname ORDER BY k.ord) AS columns
          FROM pg_index i
          JOIN pg_class c ON c.oid = i.indexrelid
          CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
          JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
         WHERE c.relnamespace = 'public'::regnamespace AND c.reltuples >= $1
           AND NOT (0 = ANY (i.indkey::int2[]))
         GROUP BY c.relname""", BIG)
    return {r["index"]: list(r["columns"]) for r in rows}


def _range_walked(node: dict[str, Any], indexes: dict[str, list[str]]) -> str | None:
    """Why an index scan reads a range rather than the rows it needs, or None:
    - its condition leaves the index's first column open, so it walks the whole index (a
      ``WHERE id = …`` on a ``(user_id, id)`` key), a sequential scan in all but name;
    - it names the user and nothing else of a ``(user_id, …)`` index, so it walks all of that
      user's rows and filters them: a join to a CTE's row put on the wrong side (``m.user_id =
      $1 AND m.id = upd.tool_message_id`` read every message of the user, then matched), which
      costs nothing for a new user and grows with the history of a busy one (so the round
      trip is judged as a user with a history: ``_busy_actor``)."""
    columns = indexes.get(node.get("Index Name", ""))
    if columns is None or node.get("Filter", "") in RARE_FALLBACKS:
        return None
    cond = node.get("Index Cond", "")
    named = [c for c in columns if re.search(rf"\b{re.escape(c)}\b", cond)]
    if columns[0] not in named:
        return "the whole index"
    if columns[0] == "user_id" and len(columns) > 1 and named == ["user_id"]:
        return "every row of the user"
    return None


async def _assert_indexed(database_url: str, statements: list[Statement]) -> None:
    """No sequential scan of a big table, no index read as a range where the statement needs
    a row (``_range_walked``), and (``enable_seqscan = off``) no table, however small, that no
    index can serve."""
    conn = await connect(database_url)
    try:
        big, big_tables = await _big_tables(conn)
        assert {"messages", "message_components", "decisions", "threads", "turns",
                "push_outbox", "component_audit"} <= big_tables, big_tables  # the load did
        indexes = await _index_columns(conn)
        for sql, args in statements:
            for mode in plans.MODES:
                nodes = await _plan(conn, sql, args, mode)
                seq = [n["Relation Name"] for n in nodes
                       if n["Node Type"] == "Seq Scan" and n.get("Relation Name") in big]
                assert not seq, f"{mode}: sequential scan of {seq} in\n{sql}"
                walked = [f"{n['Index Name']} ({n.get('Index Cond', 'no condition')}): {why}"
                          for n in nodes if n.get("Relation Name") in big
                          and (why := _range_walked(n, indexes))]
                assert not walked, f"{mode}: an index read as a range: {walked} in\n{sql}"
            await conn.execute("SET enable_seqscan = off")
            seq = [n.get("Relation Name") for n in await _plan(conn, sql, args, "auto")
                   if n["Node Type"] == "Seq Scan"]
            await conn.execute("RESET enable_seqscan")
            assert not seq, f"no index can serve {seq} in\n{sql}"
    finally:
        await conn.close()


async def _busy_actor(h: Harness, database_url: str) -> Actor:
    """One of the loaded users (200 cards, their messages, decisions and pushes), with tokens.

    A user created after the ANALYZE would be judged by statistics that put every user of the
    load in the most-common-values list and him at one row: the planner then ties a key's own
    index with the primary key's user prefix (both "one row") and picks either, by page counts
    that differ from run to run. Judged as a user with a history, the plan must find the row
    by its key, which is what matters for the users whose history is long."""
    conn = await connect(database_url)
    try:
        row = await conn.fetchrow(
            "SELECT u.id::text AS user_id, t.id::text AS main_thread_id FROM users u"
            " JOIN threads t ON t.user_id = u.id AND t.kind = 'main' WHERE u.name = $1", BUSY)
    finally:
        await conn.close()
    assert row is not None, f"the load made no user {BUSY}"
    user_token = await h.services.auth.create_token(BUSY, "user")
    agent_token = await h.services.auth.create_token(BUSY, "agent", for_main=True)
    return Actor(BUSY, row["user_id"], row["main_thread_id"], user_token, agent_token,
                 h.with_token(user_token), h.with_token(agent_token))


async def test_round_trip_uses_indexes_only(counted: tuple[Harness, counting.StatementLog],
                                            database_url: str) -> None:
    """The post (``"execute": true``), the answer and the statements of the triggers they
    fire each reach every big table by its key."""
    h, log = counted
    actor = await _busy_actor(h, database_url)
    await _round_trip(h, log, actor)  # warm-up: type introspection happens once
    posted, answered = await _round_trip(h, log, actor)
    # the statements the answer request sent (the token is cached by then): load the
    # definition, then one statement (components.store.ANSWER_SETTLE): CAS+mirror+audit,
    # message+wake, settle the carrier, cancel its pending pushes + enqueue the withdraw
    assert len(answered) == 2, "\n".join(q for q, _ in answered)
    assert len(posted) == 2, "\n".join(q for q, _ in posted)  # the read, POST_CARDS
    statements = posted + answered
    conn = await connect(database_url)
    try:
        sources = {function: str(await conn.fetchval(
            "SELECT pg_get_functiondef($1::regprocedure)", function))
            for function in TRIGGER_STATEMENTS}
        thread = await conn.fetchrow(
            "SELECT user_id::text, id::text FROM threads WHERE kind = 'normal' LIMIT 1")
    finally:
        await conn.close()
    for function, fragments in TRIGGER_STATEMENTS.items():
        for fragment, sql in fragments.items():
            assert fragment in sources[function], (
                f"the trigger {function} changed: update TRIGGER_STATEMENTS\n{sources[function]}")
            if not sql:  # a fragment only checked for presence
                continue
            args = ((thread["user_id"], thread["id"]) if "$2" in sql
                    else (thread["user_id"],))
            statements.append((sql, args))
    await _assert_indexed(database_url, statements)


async def test_the_live_activity_refresh_reads_one_partition_per_table(
        database_url: str) -> None:
    """The refresh runs on every post and answer with its generic plans, one user at a time
    (0026_live_activity_per_user). On the schema partitioned by user (CI's partitioned run)
    each of its statements must read that user's partition of each table: a first version
    named the user as an array and through a join, which a generic plan cannot prune, and read
    every partition of ``decisions``. On the plain schema each table is one relation anyway."""
    conn = await connect(database_url)
    try:
        user_id = await conn.fetchval("SELECT id::text FROM users WHERE name = $1", BUSY)
        parent = {r["part"]: r["tbl"] for r in await conn.fetch(
            "SELECT c.relname AS part, p.relname AS tbl FROM pg_inherits i"
            " JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent")}
        for sql in [*TRIGGER_STATEMENTS["maxclaw_refresh_live_activities(uuid[])"].values(),
                    *TRIGGER_STATEMENTS["maxclaw_queue_live_activities(uuid[])"].values()]:
            if not sql:
                continue
            read: dict[str, set[str]] = {}
            for node in await _plan(conn, sql, (user_id,), "force_generic_plan"):
                if "Relation Name" in node:
                    relation = node["Relation Name"]
                    read.setdefault(parent.get(relation, relation), set()).add(relation)
            assert read and all(len(r) == 1 for r in read.values()), f"{read} in\n{sql}"
    finally:
        await conn.close()


async def test_sweep_claims_through_the_due_index(database_url: str) -> None:
    await dataset.load(database_url, "due", 200, due=True)
    conn = await connect(database_url)
    try:
        for mode in plans.MODES:
            rows = await plans.explain(conn, sweep_store.CLAIM_DUE,
                                       (await conn.fetchval("SELECT now()"), 500), mode)
            plan = plans.root(rows)
            text = str(plan)
            assert "message_components_due" in text, f"{mode}: {text}"
            big_seq = [n.get("Relation Name") for n in _scans(plan["Plan"])
                       if n["Node Type"] == "Seq Scan"
                       and n.get("Relation Name") in ("message_components", "messages",
                                                      "threads")]
            assert not big_seq, f"{mode}: {text}"
    finally:
        await conn.close()


async def test_main_timeout_sweep_claims_through_its_index(database_url: str) -> None:
    """The main-timeout sweep (issue 31) finds the cards whose time with Main is up through
    ``message_components_main_due`` (its predicate spelled out in the claim, so a generic plan
    uses it too), never a scan of everyone's cards; a settings change moves his held cards'
    moments by key."""
    conn = await connect(database_url)
    try:
        # some open cards handed to Main: a few of them past their time, most not yet
        await conn.execute("""
            UPDATE message_components c
               SET status = 'with-main', due_at = NULL,
                   main_due_at = now() + CASE WHEN x.n % 20 = 0 THEN interval '-1 minute'
                                              ELSE interval '1 hour' * x.n END
              FROM (SELECT user_id, id, row_number() OVER (ORDER BY user_id, id) AS n
                      FROM message_components WHERE status = 'open' LIMIT 400) AS x
             WHERE c.user_id = x.user_id AND c.id = x.id""")
        await conn.execute("ANALYZE message_components")
        user_id = await conn.fetchval("SELECT user_id FROM message_components"
                                      " WHERE status = 'with-main' LIMIT 1")
        now = await conn.fetchval("SELECT now()")
        for mode in plans.MODES:
            for sql, args in ((sweep_store.CLAIM_MAIN_TIMEOUT, (now, 500)),
                              (prefs_store.SHIFT_MAIN_DUE, (user_id, 30))):
                nodes = await _plan(conn, sql, args, mode)
                big_seq = [n.get("Relation Name") for n in nodes
                           if n["Node Type"] == "Seq Scan"
                           and n.get("Relation Name") in ("message_components", "messages",
                                                          "threads")]
                assert not big_seq, f"{mode}: {nodes}"
            assert "message_components_main_due" in str(
                await _plan(conn, sweep_store.CLAIM_MAIN_TIMEOUT, (now, 500), mode)), mode
    finally:
        await conn.close()


async def test_settings_change_reads_his_open_cards_through_an_index(database_url: str) -> None:
    """A settings change recomputes his open cards' due times (issue 29): its read locks his
    open cards through ``message_components_user_open`` (never a scan of everyone's cards),
    and its update touches them by key, whatever the table holds."""
    conn = await connect(database_url)
    try:
        user_id = await conn.fetchval("SELECT user_id FROM message_components"
                                      " WHERE status = 'open' LIMIT 1")
        for mode in plans.MODES:
            for sql, args in ((prefs_store.OPEN_CARDS, (user_id,)),
                              (prefs_store.SET_DUE, (user_id, ["x:q1"], [None]))):
                nodes = await _plan(conn, sql, args, mode)
                text = str(nodes)
                big_seq = [n.get("Relation Name") for n in nodes
                           if n["Node Type"] == "Seq Scan"
                           and n.get("Relation Name") in ("message_components", "messages",
                                                          "threads")]
                assert not big_seq, f"{mode}: {text}"
            assert "message_components_user_open" in str(
                await _plan(conn, prefs_store.OPEN_CARDS, (user_id,), mode)), mode
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
    # one statement, its own transaction (components.store.ANSWER_SETTLE): CAS+mirror+audit,
    # message+wake, settle carrier, cancel pushes+withdraw; the card's definition was cached
    # when its post committed on this process (another replica reads it first: one statement
    # more, as test_answer_path_uses_indexes_only sends). Was 9 SQL + 1 pool reset before the
    # CTE merges, the definition cache and the reset-free pool, then 4 SQL + BEGIN/COMMIT
    # until the settlement became one statement (docs/benchmarks.md, issue 20).
    assert answered == {"sql": 1, "begin_commit": 0, "pool_reset": 0}

    async def lose() -> None:
        with pytest.raises(ComponentError) as lost:
            await components.answer(user, cids[1], ["drop"], None, "card")
        assert lost.value.reason == "settled"

    # a surface that loses the race reads why and writes nothing: CAS (the definition is
    # cached now), status
    assert await _count(log, lose) == {"sql": 2, "begin_commit": 0, "pool_reset": 0}

    # a card posted while Max watches the thread has no carrier: no settle, no pushes
    tid = await new_thread(actor.user)
    await h.services.presence.focus("conn-1", actor.user_id, tid)
    call_id, _ = await post_card(actor.agent, tid)
    watched = await _count(log, lambda: components.answer(user, f"{call_id}:q1", ["keep"],
                                                          None, "card"))
    assert watched == {"sql": 1, "begin_commit": 0, "pool_reset": 0}

    # over HTTP: the token was looked up by this client's earlier requests and is cached
    http = await _count(log, lambda: actor.user.post(f"/v1/components/{cids[2]}/answer",
                                                     json={"selected": ["keep"]}))
    assert http == {"sql": 1, "begin_commit": 0, "pool_reset": 0}


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
    """An agent's round trip over HTTP with ``"execute": true``: two requests, three
    statements, no BEGIN/COMMIT. The post: one read (thread, stored results, presence, the
    echo check's live secrets), then one statement (components.post_store.POST_CARDS: the assistant
    row, the tool rows, the carriers, their pushes, the component rows); the answer: one
    statement (components.store.ANSWER_SETTLE; the card's definition cached by the post).
    Posting and executing as two requests cost 4 + 8 statements, and the answer one read more:
    19 per round trip, then 14 with ``"execute": true``, 15 with the secrets' echo check, 3
    since each step's writes are one statement (issue 20)."""
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

        # the read (the echo check's rows folded in) and the write, whatever the number of
        # questions: was 7 SQL + BEGIN/COMMIT (the echo check's read, the assistant row, the
        # tool row, carriers, pushes, components each a statement)
        assert await _count(log, posted) == {"sql": 2, "begin_commit": 0, "pool_reset": 0}
        # a retried post writes nothing: the read, the call's row, execute's replay read
        assert await _count(log, posted) == {"sql": 3, "begin_commit": 0, "pool_reset": 0}

        async def answered(call_id: str = call_id) -> None:
            resp = await actor.user.post(f"/v1/components/{call_id}:q1/answer",
                                         json={"selected": ["keep"]})
            assert resp.status_code == 200, resp.text

        # the answer: one statement (ANSWER_SETTLE), no BEGIN/COMMIT of its own
        assert await _count(log, answered) == {"sql": 1, "begin_commit": 0, "pool_reset": 0}
