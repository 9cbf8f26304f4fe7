"""The schema as migrations build it: equal to the declared metadata, reversible, one rev
sequence across the synced tables, and a NOTIFY hint that only committed writes send."""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import asyncpg
import psycopg
import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

from maxclaw.db import migrate
from maxclaw.db.schema import (
    HAVE_SEARCH_EXTENSIONS,
    SEARCH_INDEXES,
    SYNCED_TABLES,
    XID8,
    include_object,
    live_sql,
    metadata,
)
from maxclaw.db.urls import plain_url, sqlalchemy_url, with_database

Snapshot = dict[str, list[tuple[Any, ...]]]

# What the catalog says about the public schema; alembic's autogenerate compare does not look at
# CHECK constraints or at partial-index predicates, so the test compares these directly too.
CATALOG_QUERIES = {
    "columns": """
        SELECT table_name, column_name, data_type, udt_name, is_nullable, column_default,
               is_identity, identity_generation
          FROM information_schema.columns
         WHERE table_schema = 'public' AND table_name <> 'alembic_version'
         ORDER BY 1, 2""",
    "constraints": """
        SELECT conrelid::regclass::text AS tbl, conname, pg_get_constraintdef(oid)
          FROM pg_constraint
         WHERE connamespace = 'public'::regnamespace
           AND conrelid::regclass::text <> 'alembic_version'
         ORDER BY 1, 2""",
    "indexes": """
        SELECT tablename, indexname, indexdef FROM pg_indexes
         WHERE schemaname = 'public' AND tablename <> 'alembic_version'
         ORDER BY 1, 2""",
}

# What metadata does not declare (triggers, functions, free sequences): live.sql declares it.
PROGRAMMABLE_QUERIES = {
    "triggers": """
        SELECT event_object_table, trigger_name, action_timing, event_manipulation
          FROM information_schema.triggers WHERE trigger_schema = 'public' ORDER BY 1, 2, 4""",
    "functions": """
        SELECT proname FROM pg_proc WHERE pronamespace = 'public'::regnamespace ORDER BY 1""",
    "sequences": """
        SELECT sequence_name FROM information_schema.sequences
         WHERE sequence_schema = 'public' ORDER BY 1""",
}

# The whole definitions, so live.sql is checked word for word (whitespace aside), not by name.
DEFINITION_QUERIES = {
    "function_definitions": """
        SELECT proname, pg_get_functiondef(oid) FROM pg_proc
         WHERE pronamespace = 'public'::regnamespace ORDER BY 1""",
    "trigger_definitions": """
        SELECT tgname, pg_get_triggerdef(oid) FROM pg_trigger
         WHERE NOT tgisinternal ORDER BY 1""",
}


def _words(value: Any) -> Any:
    """A definition with its whitespace collapsed (layout is free; words are not)."""
    return " ".join(value.split()) if isinstance(value, str) else value


def snapshot(url: str, queries: dict[str, str]) -> Snapshot:
    with psycopg.connect(plain_url(url), autocommit=True) as conn:
        return {name: [tuple(_words(v) for v in row) for row in conn.execute(sql).fetchall()]
                for name, sql in queries.items()}


def public_tables(url: str) -> list[str]:
    with psycopg.connect(plain_url(url), autocommit=True) as conn:
        rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
                            "ORDER BY 1").fetchall()
    return [r[0] for r in rows]


def head_revision() -> str:
    head = ScriptDirectory.from_config(migrate.alembic_config("unused")).get_current_head()
    assert head is not None
    return head


@pytest.fixture
def declared_database(pg_server: str) -> Iterator[str]:
    with built_from_declarations(pg_server) as url:
        yield url


@contextmanager
def built_from_declarations(pg_server: str) -> Iterator[str]:
    """A database built from the declared schema alone: ``metadata.create_all`` and then
    ``live.sql`` (no migrations)."""
    name = f"d_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(plain_url(pg_server), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = with_database(pg_server, name)
    engine = sa.create_engine(sqlalchemy_url(url), poolclass=sa.pool.NullPool)
    metadata.create_all(engine)
    engine.dispose()
    with psycopg.connect(plain_url(url), autocommit=True) as conn:
        conn.execute(live_sql().encode())  # several statements: the simple query protocol
    yield url
    with psycopg.connect(plain_url(pg_server), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def autogenerate_diff(url: str) -> list[Any]:
    """Alembic's own comparison of a live database with ``metadata`` (types and defaults too),
    but for the search indexes, whose shape depends on the server's extensions: the catalog
    snapshot compares those, migrated against declared (``schema.SEARCH_INDEXES``)."""
    engine = sa.create_engine(sqlalchemy_url(url), poolclass=sa.pool.NullPool)
    # Teach this engine's reflection the xid8 type, so the xid columns are compared by type
    # instead of being skipped with an "unrecognized type" warning.
    dialect: Any = engine.dialect  # the PostgreSQL dialect; the base type lacks ischema_names
    dialect.ischema_names = {**dialect.ischema_names, "xid8": XID8}
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(
                conn, opts={"compare_type": True, "compare_server_default": True,
                                    "include_object": include_object})
            return list(compare_metadata(context, metadata))
    finally:
        engine.dispose()


def test_upgrade_head_equals_the_declared_metadata(empty_database: str,
                                                   declared_database: str) -> None:
    migrate.upgrade(empty_database)
    assert autogenerate_diff(empty_database) == []
    # constraints (CHECKs included), partial indexes and defaults, exactly as declared
    assert snapshot(empty_database, CATALOG_QUERIES) == snapshot(declared_database,
                                                                 CATALOG_QUERIES)
    assert sorted(public_tables(empty_database)) == sorted(
        [*metadata.tables, "alembic_version"])


def test_upgrade_head_equals_live_sql(empty_database: str, declared_database: str) -> None:
    # the sequence, functions and triggers, definitions included: live.sql is the present
    migrate.upgrade(empty_database)
    programmable = {**PROGRAMMABLE_QUERIES, **DEFINITION_QUERIES}
    migrated = snapshot(empty_database, programmable)
    assert migrated["function_definitions"]
    assert migrated["trigger_definitions"]
    assert migrated == snapshot(declared_database, programmable)


def test_search_indexes_fit_the_servers_extensions(empty_database: str,
                                                  declared_database: str) -> None:
    # pg_trgm and btree_gin are created where the server ships them (the test role may create
    # them), and the search indexes take the shape that fits, migrated and declared alike; the
    # embedded server has no contrib: full text and Han phrases, no trigrams (docs/domain.md)
    migrate.upgrade(empty_database)
    for url in (empty_database, declared_database):
        with psycopg.connect(plain_url(url), autocommit=True) as conn:
            available = conn.execute(
                "SELECT count(*) = 2 FROM pg_available_extensions"
                " WHERE name IN ('pg_trgm', 'btree_gin')").fetchall()[0][0]
            extended = conn.execute(HAVE_SEARCH_EXTENSIONS).fetchall()[0][0]
            found = {name: definition for name, definition in conn.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE indexname = ANY(%s)",
                (sorted(SEARCH_INDEXES),)).fetchall()}
        assert extended == available, url
        trigram = {"messages_search_trgm", "threads_search_trgm"}
        assert set(found) == (SEARCH_INDEXES if extended else SEARCH_INDEXES - trigram), url
        # led by the owner where btree_gin is there
        assert all(("USING gin (user_id," in d) == extended for d in found.values()), found


def test_every_table_carries_user_id() -> None:
    # so the data can later be distributed by user; ``users`` is keyed by the user id itself
    missing = [name for name, table in metadata.tables.items()
               if "user_id" not in table.c and name != "users"]
    assert missing == []


def test_rev_triggers_and_sequence_exist(database_url: str) -> None:
    programmable = snapshot(database_url, PROGRAMMABLE_QUERIES)
    stamped = {(t, e) for t, name, timing, e in programmable["triggers"]
               if name == f"{t}_stamp_rev" and timing == "BEFORE"}
    assert stamped == {(t, e) for t in SYNCED_TABLES for e in ("INSERT", "UPDATE")}
    assert {"maxclaw_stamp_rev", "maxclaw_turn_changed"} <= {
        r[0] for r in programmable["functions"]}
    assert ("maxclaw_rev_seq",) in programmable["sequences"]


def test_downgrade_to_base_and_upgrade_again(empty_database: str) -> None:
    migrate.upgrade(empty_database)
    everything = {**CATALOG_QUERIES, **PROGRAMMABLE_QUERIES}
    first = snapshot(empty_database, everything)
    assert first["columns"]
    assert first["triggers"]

    migrate.downgrade(empty_database, "base")
    assert public_tables(empty_database) == ["alembic_version"]
    gone = snapshot(empty_database, PROGRAMMABLE_QUERIES)
    assert gone == {"triggers": [], "functions": [], "sequences": []}

    migrate.upgrade(empty_database)
    assert snapshot(empty_database, everything) == first
    assert autogenerate_diff(empty_database) == []
    with psycopg.connect(plain_url(empty_database), autocommit=True) as conn:
        version = conn.execute("SELECT version_num FROM alembic_version").fetchall()
    assert version == [(head_revision(),)]


# ---- the rev sequence and the NOTIFY hint (asyncpg, like the stores) ----------------------

@pytest.fixture
async def conn(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(plain_url(database_url))
    yield connection
    await connection.close()


async def insert_user(conn: asyncpg.Connection, name: str = "max") -> str:
    return str(await conn.fetchval("INSERT INTO users (name) VALUES ($1) RETURNING id", name))


async def insert_thread(conn: asyncpg.Connection, user_id: str,
                        kind: str = "normal") -> asyncpg.Record:
    return await conn.fetchrow(
        "INSERT INTO threads (user_id, kind, title) VALUES ($1::uuid, $2, 't') "
        "RETURNING id, rev, xid::text::bigint AS xid", user_id, kind)


async def test_one_rev_sequence_across_tables_in_write_order(
        conn: asyncpg.Connection) -> None:
    user_id = await insert_user(conn)
    revs: list[tuple[str, int]] = []
    thread = await insert_thread(conn, user_id)
    revs.append(("threads", thread["rev"]))
    message = await conn.fetchrow(
        "INSERT INTO messages (user_id, thread_id, role, body) VALUES ($1::uuid, $2, 'user', 'hi') "
        "RETURNING id, rev", user_id, thread["id"])
    revs.append(("messages", message["rev"]))
    decision = await conn.fetchrow(
        "INSERT INTO decisions (user_id, kind, dedupe_key, thread_id) "
        "VALUES ($1::uuid, 'agent-question', 'ask:c1:q1', $2) RETURNING id, rev",
        user_id, thread["id"])
    revs.append(("decisions", decision["rev"]))
    # updates take a new rev too, from the same sequence, whatever the table
    revs.append(("threads", await conn.fetchval(
        "UPDATE threads SET title = 'renamed' WHERE id = $1 RETURNING rev", thread["id"])))
    revs.append(("decisions", await conn.fetchval(
        "UPDATE decisions SET status = 'settled' WHERE id = $1 RETURNING rev", decision["id"])))
    revs.append(("messages", await conn.fetchval(
        "UPDATE messages SET body = 'hi again' WHERE id = $1 RETURNING rev", message["id"])))
    # several tables in one transaction still get increasing revs, in statement order
    async with conn.transaction():
        revs.append(("messages", await conn.fetchval(
            "INSERT INTO messages (user_id, thread_id, role, body) "
            "VALUES ($1::uuid, $2, 'user', 'x') RETURNING rev", user_id, thread["id"])))
        revs.append(("threads", await conn.fetchval(
            "UPDATE threads SET title = 'again' WHERE id = $1 RETURNING rev", thread["id"])))

    values = [rev for _, rev in revs]
    assert all(a < b for a, b in itertools.pairwise(values)), revs
    assert values[0] > 0
    # the rev a client sees is the row's stored rev (the trigger set it, not the default)
    stored = await conn.fetchval("SELECT rev FROM threads WHERE id = $1", thread["id"])
    assert stored == values[-1]
    assert await conn.fetchval("SELECT last_value FROM maxclaw_rev_seq") == values[-1]


async def test_rev_trigger_records_the_writing_transaction(conn: asyncpg.Connection) -> None:
    user_id = await insert_user(conn)
    async with conn.transaction():
        current = await conn.fetchval("SELECT pg_current_xact_id()::text::bigint")
        thread = await insert_thread(conn, user_id)
    assert thread["xid"] == current


class Notifications:
    """Collects ``maxclaw_rev`` notifications on a connection of its own."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[str] = asyncio.Queue()

    def __call__(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        self.queue.put_nowait(payload)

    async def until_sentinel(self, sentinel: str) -> list[str]:
        """Everything delivered before ``sentinel`` (which a later commit sent)."""
        seen: list[str] = []
        while True:
            payload = await asyncio.wait_for(self.queue.get(), timeout=10)
            if payload == sentinel:
                return seen
            seen.append(payload)


@pytest.fixture
async def listener(database_url: str) -> AsyncIterator[Notifications]:
    notifications = Notifications()
    connection = await asyncpg.connect(plain_url(database_url))
    await connection.add_listener("maxclaw_rev", notifications)
    yield notifications
    await connection.remove_listener("maxclaw_rev", notifications)
    await connection.close()


async def send_sentinel(conn: asyncpg.Connection) -> str:
    """Commit a NOTIFY of our own. Notifications arrive in commit order, so whatever a
    listener has not received before the sentinel was not committed before it either."""
    sentinel = f"sentinel-{uuid.uuid4().hex}"
    await conn.execute("SELECT pg_notify('maxclaw_rev', $1)", sentinel)
    return sentinel


async def test_notify_arrives_only_after_commit(
        conn: asyncpg.Connection, listener: Notifications, database_url: str) -> None:
    user_id = await insert_user(conn)
    other = await asyncpg.connect(plain_url(database_url))
    try:
        await listener.until_sentinel(await send_sentinel(other))  # drain the user's setup
        tx = conn.transaction()
        await tx.start()
        thread = await insert_thread(conn, user_id)
        # the write is done but not committed: nothing may have been delivered yet
        assert await listener.until_sentinel(await send_sentinel(other)) == []
        await tx.commit()
        payload = json.loads(await asyncio.wait_for(listener.queue.get(), timeout=10))
    finally:
        await other.close()
    # a small hint: the user and the writing transaction, never the row (0029)
    assert payload == {"u": user_id, "x": str(thread["xid"])}


async def test_one_hint_per_user_and_transaction(
        conn: asyncpg.Connection, listener: Notifications, database_url: str) -> None:
    """The rows one transaction writes for a user (inserts and updates, in all three synced
    tables) send identical hints, which PostgreSQL delivers once; another user's rows in the
    same transaction send his own (0029_hint_per_transaction)."""
    max_id, eve_id = await insert_user(conn), await insert_user(conn, "eve")
    other = await asyncpg.connect(plain_url(database_url))
    try:
        await listener.until_sentinel(await send_sentinel(other))
        async with conn.transaction():
            first = await insert_thread(conn, max_id)
            await insert_thread(conn, max_id)
            await conn.execute("UPDATE threads SET title = 'renamed' WHERE user_id = $1::uuid",
                               max_id)
            await conn.execute("INSERT INTO messages (user_id, thread_id, role, body) "
                               "VALUES ($1::uuid, $2, 'user', 'x')", max_id, first["id"])
            await conn.execute(
                "INSERT INTO decisions (user_id, kind, dedupe_key, thread_id, title, body) "
                "VALUES ($1::uuid, 'ask', 'k', $2, 't', 'b')", max_id, first["id"])
            await insert_thread(conn, eve_id)
        delivered = await listener.until_sentinel(await send_sentinel(other))
    finally:
        await other.close()
    xid = str(first["xid"])
    assert sorted(map(json.loads, delivered), key=lambda h: h["u"] == eve_id) == [
        {"u": max_id, "x": xid}, {"u": eve_id, "x": xid}]


async def test_notify_never_arrives_after_rollback(
        conn: asyncpg.Connection, listener: Notifications, database_url: str) -> None:
    user_id = await insert_user(conn)
    other = await asyncpg.connect(plain_url(database_url))
    try:
        await listener.until_sentinel(await send_sentinel(other))
        tx = conn.transaction()
        await tx.start()
        await insert_thread(conn, user_id)
        await conn.execute("INSERT INTO messages (user_id, thread_id, role, body) "
                           "SELECT user_id, id, 'user', 'x' FROM threads WHERE user_id = $1::uuid",
                           uuid.UUID(user_id))
        await tx.rollback()
        # the rollback happened before the sentinel's commit: had anything been sent, it
        # would have been delivered before the sentinel
        assert await listener.until_sentinel(await send_sentinel(other)) == []
        # and the next committed write notifies as usual (the listener is still working)
        committed = await insert_thread(conn, user_id)
        payload = json.loads(await asyncio.wait_for(listener.queue.get(), timeout=10))
    finally:
        await other.close()
    assert payload == {"u": user_id, "x": str(committed["xid"])}


async def test_notify_can_be_switched_off_per_transaction(
        conn: asyncpg.Connection, listener: Notifications, database_url: str) -> None:
    user_id = await insert_user(conn)
    other = await asyncpg.connect(plain_url(database_url))
    try:
        await listener.until_sentinel(await send_sentinel(other))
        async with conn.transaction():
            await conn.execute("SET LOCAL maxclaw.notify = 'off'")
            quiet = await insert_thread(conn, user_id)
        assert await listener.until_sentinel(await send_sentinel(other)) == []
    finally:
        await other.close()
    assert quiet["rev"] > 0  # the rev is still stamped; only the hint is skipped
