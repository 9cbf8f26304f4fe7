"""The local stand-in for distribution by user: ``maxclaw db partition`` rebuilds every
user-owned table as ``PARTITION BY HASH (user_id)`` and keeps the schema the migrations built
(keys, indexes, triggers, foreign keys), the live-update triggers still fire, and every
statement on the answer path touches exactly one partition of each partitioned table it reads
or writes (asserted with EXPLAIN, docs/scaling.md).

The whole integration suite also runs on such a schema: ``MAXCLAW_TEST_PARTITIONS=8`` (a CI
step of its own, README)."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import psycopg
import pytest
from bench import counting

from maxclaw.app import create_app
from maxclaw.db import migrate
from maxclaw.db.database import connect
from maxclaw.db.urls import plain_url, with_database
from maxclaw.ops import partition
from maxclaw.push import action_token_store
from maxclaw.push.action_tokens import new_token
from maxclaw.realtime import store as realtime_store
from maxclaw.realtime.cursor import Position
from maxclaw.turns import store as turns_store
from tests import pg, plans
from tests.cards import CHOICE, execute, new_thread, post_call, post_card
from tests.conftest import Harness, app_settings
from tests.integration.test_cli import cli
from tests.integration.test_main_handoff import card_with_main
from tests.integration.test_schema import CATALOG_QUERIES, snapshot

PARTITIONS = 8
# the schema test's catalog, less the constraints PostgreSQL derives for each partition (a
# foreign key to a partitioned table gets one internal child per referenced partition)
PARENT_QUERIES = {**CATALOG_QUERIES, "constraints": CATALOG_QUERIES["constraints"].replace(
    "WHERE connamespace", "WHERE conparentid = 0 AND connamespace")}


def parent_catalog(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """The catalog of the public tables, partitions left out, ``ON ONLY`` read as ``ON``
    (how pg_indexes prints an index of a partitioned table)."""
    with psycopg.connect(plain_url(url), autocommit=True) as conn:
        children = {r[0] for r in conn.execute(
            "SELECT inhrelid::regclass::text FROM pg_inherits").fetchall()}
    out: dict[str, list[tuple[Any, ...]]] = {}
    for name, rows in snapshot(url, PARENT_QUERIES).items():
        out[name] = [tuple(str(v).replace(" ON ONLY ", " ON ") if isinstance(v, str) else v
                           for v in row) for row in rows if row[0] not in children]
    return out


def triggers(url: str) -> list[tuple[str, str]]:
    with psycopg.connect(plain_url(url), autocommit=True) as conn:
        rows = conn.execute("""SELECT tgrelid::regclass::text, pg_get_triggerdef(oid)
                                 FROM pg_trigger WHERE NOT tgisinternal AND tgparentid = 0
                                ORDER BY 1, 2""").fetchall()
    return [(str(t), str(d)) for t, d in rows]


@pytest.fixture
def second_empty_database(pg_server: str) -> Iterator[str]:
    name = f"e_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(plain_url(pg_server), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = with_database(pg_server, name)
    yield url
    with psycopg.connect(plain_url(pg_server), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def test_partition_keeps_the_schema(empty_database: str, second_empty_database: str,
                                          tmp_path: Path) -> None:
    db = ("--database-url", empty_database)
    run = await cli("db", "partition", "--partitions", str(PARTITIONS), *db, data_dir=tmp_path)
    run.assert_ok()
    assert json.loads(run.out) == {"partitioned": {t: PARTITIONS
                                                   for t in sorted(partition.PARTITIONED)}}
    # the code's own schema check still says current: the revision is untouched
    check = await cli("migrate", "--check", *db, data_dir=tmp_path)
    assert check.code == 0, check.err

    migrate.upgrade(second_empty_database)  # the same migrations, not partitioned
    assert parent_catalog(empty_database) == parent_catalog(second_empty_database)
    assert triggers(empty_database) == triggers(second_empty_database)
    with psycopg.connect(plain_url(empty_database), autocommit=True) as conn:
        kinds = dict(conn.execute(
            "SELECT relname, relkind FROM pg_class WHERE relname = ANY(%s)",
            ([*partition.PARTITIONED, *partition.NOT_PARTITIONED],)).fetchall())
        # row triggers were cloned onto every partition
        cloned = conn.execute("""SELECT count(*) FROM pg_trigger t
                                  WHERE t.tgname = 'threads_stamp_rev' AND t.tgparentid <> 0
                               """).fetchone()
    assert {t: kinds[t] for t in partition.PARTITIONED} == dict.fromkeys(
        partition.PARTITIONED, "p")
    assert {t: kinds[t] for t in partition.NOT_PARTITIONED} == dict.fromkeys(
        partition.NOT_PARTITIONED, "r")
    assert cloned == (PARTITIONS,)

    again = await cli("db", "partition", *db, data_dir=tmp_path)
    assert again.code == 1 and "already partitioned" in again.err, again.err


def test_partition_refuses_what_it_cannot_keep(empty_database: str) -> None:
    migrate.upgrade(empty_database, "0005_secrets")  # before 0006_user_keys
    with pytest.raises(partition.PartitionError, match="unique keys without user_id"):
        partition.partition_database(empty_database, PARTITIONS)
    migrate.upgrade(empty_database)
    with psycopg.connect(plain_url(empty_database), autocommit=True) as conn:
        conn.execute("INSERT INTO users (name) VALUES ('max')")
        conn.execute("INSERT INTO threads (user_id, kind) SELECT id, 'main' FROM users")
    with pytest.raises(partition.PartitionError, match="threads holds rows"):
        partition.partition_database(empty_database, PARTITIONS)
    with psycopg.connect(plain_url(empty_database), autocommit=True) as conn:  # unchanged
        assert conn.execute("SELECT relkind FROM pg_class WHERE relname = 'threads'"
                            ).fetchone() == ("r",)


# ---- on a partitioned database ----------------------------------------------------------------

@pytest.fixture
def partitioned_url(pg_server: str) -> Iterator[str]:
    """A fresh database cloned from the partitioned template (whatever the run's setting)."""
    template = asyncio.run(pg.ensure_template(pg_server, partitions=PARTITIONS))
    url = asyncio.run(pg.clone_database(pg_server, template))
    yield url
    asyncio.run(pg.drop_database(pg_server, url))


async def test_triggers_fire_on_partitions(partitioned_url: str) -> None:
    """The rev stamp, its hint (the user and the transaction) and the turn mirror."""
    conn = await asyncpg.connect(plain_url(partitioned_url))
    hints: asyncio.Queue[str] = asyncio.Queue()
    await conn.add_listener("maxclaw_rev", lambda *a: hints.put_nowait(a[-1]))
    try:
        user = await conn.fetchval("INSERT INTO users (name) VALUES ('max') RETURNING id")
        thread = await conn.fetchrow("INSERT INTO threads (user_id, kind) VALUES ($1, 'normal')"
                                     " RETURNING id, rev", user)
        hint = json.loads(await asyncio.wait_for(hints.get(), 10))
        xid = await conn.fetchval("SELECT xid::text FROM threads WHERE id = $1", thread["id"])
        assert hint == {"u": str(user), "x": xid}
        assert thread["rev"] > 0
        await conn.execute("INSERT INTO turns (user_id, thread_id) VALUES ($1, $2)",
                           user, thread["id"])
        assert await conn.fetchval("SELECT turn_state FROM threads WHERE id = $1",
                                   thread["id"]) == "queued"
        where = await conn.fetchval("SELECT tableoid::regclass::text FROM threads")
        assert re.fullmatch(r"threads_p\d", where), where
    finally:
        await conn.close()


@pytest.fixture
async def recorded(partitioned_url: str) -> AsyncIterator[tuple[Harness, counting.StatementLog]]:
    """The app in-process on a partitioned database, every statement it sends logged."""
    with counting.installed() as log:
        app = create_app(app_settings(partitioned_url))
        async with app.router.lifespan_context(app):
            yield Harness(app=app, services=app.state.services, client=None), log  # type: ignore[arg-type]


Statement = tuple[str, tuple[Any, ...]]
# System jobs that look across users on purpose (on a distributed database each shard runs its
# own): the lease-lapse sweep a claim runs now and then (TurnService._lapse_expired_now_and_then)
ACROSS_USERS = {" ".join(turns_store.LAPSE_EXPIRED.split())}
TABLE_WORDS = re.compile(r"\b(" + "|".join(partition.PARTITIONED) + r")\b")


async def _during(log: counting.StatementLog, call: Any) -> list[Statement]:
    with log.record():
        result = await call
        await counting.drain()
    if hasattr(result, "status_code"):
        assert result.status_code < 300, result.text
    return [(q, a) for q, a in zip(log.queries, log.args, strict=True)
            if counting.StatementLog.is_sql(q) and TABLE_WORDS.search(q)
            and q not in ACROSS_USERS]


def _partition_of(relation: str) -> tuple[str, str] | None:
    match = re.fullmatch(r"(\w+)_p(\d+)", relation)
    if match and match.group(1) in partition.PARTITIONED:
        return match.group(1), relation
    return None


def _touched(node: dict[str, Any], analyzed: bool) -> list[tuple[str, str]]:
    """(table, partition) of every scan the plan runs (with ANALYZE: that ran at least once;
    a partition pruned at execution is not in the plan, or shows ``never executed``)."""
    found: list[tuple[str, str]] = []
    relation = node.get("Relation Name")
    ran = not analyzed or node.get("Actual Loops", 0) > 0
    if relation and ran and node["Node Type"] not in ("ModifyTable",):
        hit = _partition_of(relation)
        if hit:
            found.append(hit)
    for child in node.get("Plans", []):
        found.extend(_touched(child, analyzed))
    return found


async def _explain(conn: asyncpg.Connection, sql: str, args: tuple[Any, ...], mode: str,
                   analyzed: bool) -> list[asyncpg.Record]:
    options = "ANALYZE, FORMAT JSON" if analyzed else "FORMAT JSON"
    tx = conn.transaction()
    await tx.start()
    try:
        # a generic plan only through a prepared statement (tests.plans): an EXPLAIN sent
        # with bound values is planned with them, as a custom plan, whatever the mode says
        return await plans.explain(conn, sql, args, mode, options)
    finally:
        await tx.rollback()


async def _partitions_touched(conn: asyncpg.Connection, sql: str, args: tuple[Any, ...],
                              mode: str) -> dict[str, set[str]]:
    """Per partitioned table, the partitions one run of ``sql`` reads or writes: a custom plan
    (the values known: pruning at planning) or a generic one run with ANALYZE (pruning at
    execution, "Subplans Removed"); writes are rolled back."""
    analyzed = True
    try:
        rows = await _explain(conn, sql, args, mode, analyzed)
    except asyncpg.UniqueViolationError:
        # run again, the write meets the row its first run left (a post's tool row): plain
        # EXPLAIN still starts the executor, so pruning by the statement's own parameters
        # ("Subplans Removed") shows; only pruning by values found while running would not
        analyzed = False
        rows = await _explain(conn, sql, args, mode, analyzed)
    plan = plans.root(rows)
    out: dict[str, set[str]] = {}
    for table, part in _touched(plan["Plan"], analyzed):
        out.setdefault(table, set()).add(part)
    written = re.match(r"\s*(?:INSERT INTO|UPDATE|DELETE FROM)\s+(\w+)", sql)
    if written and written.group(1) in partition.PARTITIONED:
        out.setdefault(written.group(1), set())  # routed by its rows' user_id (one user)
    return out


# The key of the reads of several users at once (the change stream's catch-up, realtime.store)
BY_USERS = "t.user_id = ANY($1::uuid[])"


async def _assert_one_partition_each(url: str, flow: str, statements: list[Statement],
                                     user_id: str) -> int:
    conn = await connect(url)
    try:
        touched_any = 0
        for sql, args in statements:
            for mode in plans.MODES:
                touched = await _partitions_touched(conn, sql, args, mode)
                many = {t: sorted(p) for t, p in touched.items() if len(p) > 1}
                if many and mode == "force_generic_plan" and BY_USERS in sql:
                    # PostgreSQL prunes hash partitions by an array only when it knows the
                    # array (a custom plan, checked above): the generic plan of a read of
                    # several users at once probes each partition's index for them. That
                    # costs an index probe per partition, never a scan, which is what is
                    # checked here for it
                    text = json.dumps((await _explain(conn, sql, args, mode, False))[0][0])
                    assert "Seq Scan" not in text, f"{flow} ({mode}): a scan in\n{sql}\n{text}"
                    continue
                assert not many, f"{flow} ({mode}): more than one partition {many} in\n{sql}"
                touched_any += sum(len(p) for p in touched.values())
            # an INSERT's rows go to their user's partition: every user id it carries is one
            users = {str(a) for a in _flatten(args) if _is_uuid(a)} & set(await _user_ids(conn))
            assert users <= {user_id}, f"{flow}: writes for {users} in\n{sql}"
        return touched_any
    finally:
        await conn.close()


def _flatten(args: tuple[Any, ...]) -> list[Any]:
    """Every scalar of the arguments, inside arrays and the JSON rows of a statement that
    takes its rows as objects (POST_CARDS, ENQUEUE_MANY: their user ids are in there)."""
    out: list[Any] = []
    for a in args:
        if isinstance(a, dict):
            out.extend(_flatten(tuple(a.values())))
        elif isinstance(a, (list, tuple)):
            out.extend(_flatten(tuple(a)))
        else:
            out.append(a)
    return out


def _is_uuid(value: Any) -> bool:
    try:
        uuid.UUID(str(value))
    except ValueError:
        return False
    return True


async def _user_ids(conn: asyncpg.Connection) -> list[str]:
    return [str(r[0]) for r in await conn.fetch("SELECT id FROM users")]


async def test_the_answer_path_touches_one_partition(
        recorded: tuple[Harness, counting.StatementLog], partitioned_url: str) -> None:
    h, log = recorded
    for other in ("ada", "bob", "cy"):  # other users' rows in other partitions
        neighbour = await h.actor(other)
        await post_card(neighbour.agent, await new_thread(neighbour.user), CHOICE)
    a = await h.actor("max")
    device = await a.user.post("/v1/push/devices", json={"platform": "log"})
    assert device.status_code == 201, device.text
    flows: dict[str, list[Statement]] = {}

    async def card() -> tuple[str, str, int]:
        tid = await new_thread(a.user)
        call_id = await post_call(a.agent, tid, "ask_user_question",
                                  {"title": "Rename the status field", "questions": [CHOICE]})
        flows.setdefault("post card", []).extend(
            await _during(log, execute(a.agent, tid, call_id)))
        cid = f"{call_id}:q1"
        decision = (await a.user.get(f"/v1/components/{cid}")).json()["decision_id"]
        return tid, cid, int(decision)

    _, cid, _ = await card()
    flows["answer from the card"] = await _during(log, a.user.post(
        f"/v1/components/{cid}/answer", json={"selected": ["keep"]}))
    _, _, decision = await card()
    flows["answer from the panel"] = await _during(log, a.user.post(
        f"/v1/decisions/{decision}/settle", json={"selected": ["drop"]}))
    _, _, decision = await card()
    flows["answer from a push action (bearer)"] = await _during(log, a.user.post(
        "/v1/push/actions", json={"decision_id": decision, "action": "opt:keep"}))
    _, _, decision = await card()
    token, digest = new_token()
    async with h.services.db.connection() as conn:
        now = await conn.fetchval("SELECT now()")
        await action_token_store.mint(conn, user_id=a.user_id, decision_id=decision,
                                      device_id=int(device.json()["id"]), token_hash=digest,
                                      now=now, expires_at=now.replace(year=now.year + 1))
    flows["answer from a push action (token)"] = await _during(log, h.with_token(None).post(
        "/v1/push/actions", json={"action_token": token, "action": "opt:keep"}))
    _, cid = await card_with_main(a, CHOICE)
    call = await post_call(a.agent, a.main_thread_id, "answer_for_max", {
        "component_id": cid, "selected": ["keep"], "reason": "safer for clients"})
    flows["Main answers"] = await _during(log, execute(a.agent, a.main_thread_id, call))
    flows["wake-up: turn claim"] = await _during(log, a.agent.post(
        "/v1/agent/turns/claim", json={"runtime_id": "rt-1"}))

    async def hint_read() -> None:
        async with h.services.db.connection() as conn:
            await realtime_store.read_changes(conn, [a.user_id], Position(0, 0))
    flows["realtime: the hinted user's changes"] = await _during(log, hint_read())

    assert all(flows.values()), {f: len(s) for f, s in flows.items()}
    for flow, statements in flows.items():
        touched = await _assert_one_partition_each(partitioned_url, flow, statements,
                                                   a.user_id)
        assert touched, f"{flow}: no statement read a partition (the check saw nothing)"
