"""Hints after the commit (0030_hints_after_commit, ``MAXCLAW_HINTS_AFTER_COMMIT``): a
transaction of the service's pool keeps its rev and turn hints out of its own commit, which
would otherwise hold PostgreSQL's cluster-wide NOTIFY lock until its commit record is flushed,
and sends them right after it, in the COMMIT's round trip. Without the setting, and for every
other writer, hints are NOTIFYed inside the transaction as before (test_schema.py's hint tests
run on plain connections and hold that path).

Notifications are delivered in commit order, so a sentinel NOTIFY committed by another
connection tells "nothing was sent" from "not yet delivered" (test_schema.send_sentinel)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from maxclaw.db.database import Database
from maxclaw.db.urls import plain_url
from maxclaw.ops.services import database_for
from tests import pooler
from tests.cards import ask_args, new_thread
from tests.conftest import app_settings, harness_for
from tests.integration.test_schema import (
    Notifications,
    insert_thread,
    insert_user,
)

OWED = "SELECT coalesce(current_setting('maxclaw.owed_rev', true), '') AS rev, " \
       "coalesce(current_setting('maxclaw.owed_turn', true), '') AS turn"


def direct(database_url: str) -> str:
    """The URL that reaches PostgreSQL itself: a session for LISTEN and for the raw statements
    below (BEGIN and COMMIT by hand, session settings), also when the tests run through
    PgBouncer in transaction mode (.ci/run's PgBouncer step runs this file)."""
    return str(pooler.settings_for(database_url).get("listen_database_url", database_url))


@pytest.fixture
async def conn(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(plain_url(direct(database_url)))
    yield connection
    await connection.close()


@pytest.fixture
async def other(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    """A connection of its own for the sentinels."""
    connection = await asyncpg.connect(plain_url(direct(database_url)))
    yield connection
    await connection.close()


@pytest.fixture
async def heard(database_url: str) -> AsyncIterator[dict[str, Notifications]]:
    """What the rev and turn channels deliver, each with its own queue."""
    channels = {"maxclaw_rev": Notifications(), "maxclaw_turn": Notifications()}
    connection = await asyncpg.connect(plain_url(direct(database_url)))
    for channel, notifications in channels.items():
        await connection.add_listener(channel, notifications)
    yield channels
    await connection.close()


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[Database]:
    """The service's pool with hints after the commit, as the app builds it (through the
    pooler when the tests use one), with one connection: every block below runs on the same
    session and its owed settings can be read after the block (through PgBouncer each
    transaction may land on another server connection; then the check reads whichever it
    gets, which must owe nothing either)."""
    database = database_for(app_settings(database_url, hints_after_commit=True),
                            min_size=1, max_size=1)
    await database.open()
    yield database
    await database.close()


@pytest.fixture
async def plain_db(database_url: str) -> AsyncIterator[Database]:
    """The service's pool as it ships (whatever the environment says: .ci/run runs the
    integration tests once more with MAXCLAW_HINTS_AFTER_COMMIT=true)."""
    database = database_for(app_settings(database_url, hints_after_commit=False),
                            min_size=1, max_size=1)
    await database.open()
    yield database
    await database.close()


async def drained(heard: dict[str, Notifications], other: asyncpg.Connection,
                  ) -> dict[str, list[str]]:
    """What each channel delivered before a sentinel committed now on it."""
    out: dict[str, list[str]] = {}
    for channel, notifications in heard.items():
        sentinel = f"sentinel-{uuid.uuid4().hex}"
        await other.execute("SELECT pg_notify($1, $2)", channel, sentinel)
        out[channel] = await notifications.until_sentinel(sentinel)
    return out


async def test_a_transaction_that_owes_its_hints_keeps_them_out_of_its_commit(
        conn: asyncpg.Connection, other: asyncpg.Connection,
        heard: dict[str, Notifications]) -> None:
    """The mechanism in SQL: the commit sends nothing, the session owes the hints (the rev
    hint once for the user's rows, the turn hint for the queued turn), and
    ``maxclaw_send_owed_hints()`` sends them, with the same payloads, and forgets them."""
    user = await insert_user(conn)
    await drained(heard, other)
    await conn.execute("BEGIN; SET LOCAL maxclaw.notify = 'after_commit'")
    thread = await insert_thread(conn, user)
    await conn.execute("INSERT INTO messages (user_id, thread_id, role, body) "
                       "VALUES ($1::uuid, $2, 'user', 'x')", user, thread["id"])
    await conn.execute("INSERT INTO turns (user_id, thread_id) VALUES ($1::uuid, $2)",
                       user, thread["id"])
    await conn.execute("COMMIT")
    rev = json.dumps({"u": user, "x": str(thread["xid"])}, separators=(",", ":"))
    owed = await conn.fetchrow(OWED)
    assert json.loads(owed["rev"]) == json.loads(rev) and owed["turn"] == user
    assert await drained(heard, other) == {"maxclaw_rev": [], "maxclaw_turn": []}

    await conn.execute("SELECT maxclaw_send_owed_hints()")
    delivered = await drained(heard, other)
    assert [json.loads(h) for h in delivered["maxclaw_rev"]] == [
        {"u": user, "x": str(thread["xid"])}]
    assert delivered["maxclaw_turn"] == [user]
    assert tuple(await conn.fetchrow(OWED)) == ("", "")
    # sending again sends nothing: what was owed is forgotten once sent
    await conn.execute("SELECT maxclaw_send_owed_hints()")
    assert await drained(heard, other) == {"maxclaw_rev": [], "maxclaw_turn": []}


async def test_a_rollback_takes_the_owed_hints_back(
        conn: asyncpg.Connection, other: asyncpg.Connection,
        heard: dict[str, Notifications]) -> None:
    user = await insert_user(conn)
    thread = await insert_thread(conn, user)
    await drained(heard, other)
    await conn.execute("BEGIN; SET LOCAL maxclaw.notify = 'after_commit'")
    await conn.execute("INSERT INTO messages (user_id, thread_id, role, body) "
                       "VALUES ($1::uuid, $2, 'user', 'x')", user, thread["id"])
    assert (await conn.fetchrow(OWED))["rev"] != ""
    await conn.execute("ROLLBACK")
    assert tuple(await conn.fetchrow(OWED)) == ("", "")
    await conn.execute("SELECT maxclaw_send_owed_hints()")
    assert await drained(heard, other) == {"maxclaw_rev": [], "maxclaw_turn": []}


async def test_a_second_user_is_notified_inside_the_transaction(
        conn: asyncpg.Connection, other: asyncpg.Connection,
        heard: dict[str, Notifications]) -> None:
    """One hint per channel is owed; a second user's rows notify at the commit, as before."""
    max_id, eve_id = await insert_user(conn), await insert_user(conn, "eve")
    await drained(heard, other)
    await conn.execute("BEGIN; SET LOCAL maxclaw.notify = 'after_commit'")
    first = await insert_thread(conn, max_id)
    await insert_thread(conn, max_id)
    await insert_thread(conn, eve_id)
    await conn.execute("COMMIT")
    xid = str(first["xid"])
    assert [json.loads(h) for h in (await drained(heard, other))["maxclaw_rev"]] == [
        {"u": eve_id, "x": xid}]
    await conn.execute("SELECT maxclaw_send_owed_hints()")
    assert [json.loads(h) for h in (await drained(heard, other))["maxclaw_rev"]] == [
        {"u": max_id, "x": xid}]


async def test_the_pools_transactions_send_their_hints_with_their_commit(
        db: Database, conn: asyncpg.Connection, other: asyncpg.Connection,
        heard: dict[str, Notifications]) -> None:
    """``Database.transaction()``: asyncpg's BEGIN says it owes the hints and its COMMIT sends
    them (``HINTED_EDGES``, keyed by asyncpg's exact statements: if they change, the first
    assertion fails), so the hint arrives once, with its payload, and nothing stays owed."""
    user = await insert_user(conn)
    await drained(heard, other)
    async with db.transaction() as tx:
        assert await tx.fetchval("SELECT current_setting('maxclaw.notify', true)") == \
            "after_commit"
        thread = await insert_thread(tx, user)
        await tx.execute("UPDATE threads SET title = 'again' WHERE user_id = $1::uuid", user)
        await tx.execute("INSERT INTO turns (user_id, thread_id) VALUES ($1::uuid, $2)",
                         user, thread["id"])
    delivered = await drained(heard, other)
    assert [json.loads(h) for h in delivered["maxclaw_rev"]] == [
        {"u": user, "x": str(thread["xid"])}]
    assert delivered["maxclaw_turn"] == [user]
    async with db.connection() as same:  # the pool's only connection: the same session
        assert tuple(await same.fetchrow(OWED)) == ("", "")
        # outside a transaction of the pool a write notifies inside its own statement
        assert await same.fetchval("SELECT current_setting('maxclaw.notify', true)") in (None, "")
        await insert_thread(same, user)
    assert len((await drained(heard, other))["maxclaw_rev"]) == 1


async def test_notify_off_still_wins_in_a_transaction_of_the_pool(
        db: Database, conn: asyncpg.Connection, other: asyncpg.Connection,
        heard: dict[str, Notifications]) -> None:
    user = await insert_user(conn)
    await drained(heard, other)
    async with db.transaction(notify=False) as tx:
        await insert_thread(tx, user)
    assert await drained(heard, other) == {"maxclaw_rev": [], "maxclaw_turn": []}
    async with db.connection() as same:
        assert tuple(await same.fetchrow(OWED)) == ("", "")


async def write_then_fail_at_commit(db: Database, user: str) -> None:
    async with db.transaction() as tx:
        await insert_thread(tx, user)
        await tx.execute("INSERT INTO fails_at_commit VALUES (1)")


async def test_a_commit_that_fails_sends_nothing_and_owes_nothing(
        db: Database, conn: asyncpg.Connection, other: asyncpg.Connection,
        heard: dict[str, Notifications]) -> None:
    """A deferred check that fails at COMMIT: the rest of the COMMIT's query (the sending) is
    not run, and the rollback took back what the transaction owed."""
    user = await insert_user(conn)
    await conn.execute("""
        CREATE TABLE fails_at_commit (id int);
        CREATE FUNCTION fail_now() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION 'refused at commit'; END $$;
        CREATE CONSTRAINT TRIGGER refuse AFTER INSERT ON fails_at_commit
            DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION fail_now();""")
    await drained(heard, other)
    with pytest.raises(asyncpg.RaiseError, match="refused at commit"):
        await write_then_fail_at_commit(db, user)
    assert await drained(heard, other) == {"maxclaw_rev": [], "maxclaw_turn": []}
    assert await conn.fetchval("SELECT count(*) FROM threads WHERE user_id = $1::uuid",
                               user) == 0
    async with db.connection() as same:
        assert tuple(await same.fetchrow(OWED)) == ("", "")
    # and the connection goes on: the next transaction's hint arrives
    async with db.transaction() as tx:
        thread = await insert_thread(tx, user)
    assert [json.loads(h) for h in (await drained(heard, other))["maxclaw_rev"]] == [
        {"u": user, "x": str(thread["xid"])}]


class Undo(Exception):
    pass


async def write_in_a_savepoint_then_undo(tx: asyncpg.Connection, user: str) -> None:
    async with tx.transaction():
        await insert_thread(tx, user)
        raise Undo


async def test_a_savepoint_rolled_back_takes_back_what_it_owed(
        db: Database, conn: asyncpg.Connection, other: asyncpg.Connection,
        heard: dict[str, Notifications]) -> None:
    """A savepoint inside a transaction of the pool (turns/messages.py takes one) stays a
    savepoint, and what was owed inside it goes with its rollback."""
    user = await insert_user(conn)
    await drained(heard, other)
    async with db.transaction() as tx:
        with pytest.raises(Undo):
            await write_in_a_savepoint_then_undo(tx, user)
        assert (await tx.fetchrow(OWED))["rev"] == ""
    assert await drained(heard, other) == {"maxclaw_rev": [], "maxclaw_turn": []}


async def test_writer_is_a_transaction_only_when_hints_go_after_the_commit(
        db: Database, plain_db: Database, conn: asyncpg.Connection,
        other: asyncpg.Connection, heard: dict[str, Notifications]) -> None:
    """``Database.writer()`` (the post with ``execute`` and the answer): autocommit and the
    hint inside the commit by default; with the setting, a transaction that owes its hint to
    its COMMIT, which sends it (one hint either way, with the same payload)."""
    user = await insert_user(conn)
    await drained(heard, other)
    for database, in_transaction, notify in ((plain_db, False, ""),
                                             (db, True, "after_commit")):
        async with database.writer() as w:
            assert w.is_in_transaction() is in_transaction
            assert await w.fetchval(
                "SELECT coalesce(current_setting('maxclaw.notify', true), '')") == notify
            thread = await insert_thread(w, user)
        assert [json.loads(h) for h in (await drained(heard, other))["maxclaw_rev"]] == [
            {"u": user, "x": str(thread["xid"])}]
        async with database.connection() as same:
            assert tuple(await same.fetchrow(OWED)) == ("", "")


async def test_by_default_the_pool_notifies_inside_its_transactions(
        plain_db: Database, conn: asyncpg.Connection, other: asyncpg.Connection,
        heard: dict[str, Notifications]) -> None:
    """Without the setting nothing changes: asyncpg's BEGIN and COMMIT go as they are, the
    triggers NOTIFY inside the transaction, and nothing is ever owed."""
    user = await insert_user(conn)
    await drained(heard, other)
    async with plain_db.transaction() as tx:
        assert await tx.fetchval("SELECT current_setting('maxclaw.notify', true)") in (None, "")
        thread = await insert_thread(tx, user)
        await tx.execute("INSERT INTO turns (user_id, thread_id) VALUES ($1::uuid, $2)",
                         user, thread["id"])
        assert tuple(await tx.fetchrow(OWED)) == ("", "")
    delivered = await drained(heard, other)
    assert [json.loads(h) for h in delivered["maxclaw_rev"]] == [
        {"u": user, "x": str(thread["xid"])}]
    assert delivered["maxclaw_turn"] == [user]


async def test_with_the_setting_the_post_and_the_answer_wake_as_before(
        database_url: str, other: asyncpg.Connection,
        heard: dict[str, Notifications]) -> None:
    """End to end with MAXCLAW_HINTS_AFTER_COMMIT: the post with ``execute`` and the answer
    (each a transaction now, ``Database.writer``) send one rev hint each after their commit,
    and the answer's turn hint wakes a claim that only the NOTIFY can wake."""
    async with harness_for(database_url, hints_after_commit=True) as harness:
        max_ = await harness.actor("max")
        thread = await new_thread(max_.user)
        await drained(heard, other)
        row = {"role": "assistant", "content": None, "execute": True, "tool_calls": [
            {"id": "call_h1", "type": "function",
             "function": {"name": "ask_user_question", "arguments": json.dumps(ask_args())}}]}
        posted = await max_.agent.post(f"/v1/agent/threads/{thread}/messages", json=row)
        assert posted.status_code == 201, posted.text
        assert [json.loads(h)["u"] for h in (await drained(heard, other))["maxclaw_rev"]] == [
            max_.user_id]

        harness.services.turns.poll_s = 60  # no polling fallback within the test's patience
        waiting = asyncio.create_task(max_.agent.post(
            "/v1/agent/turns/claim", json={"wait_s": 30, "runtime_id": "rt-1"}, timeout=60))
        listener = harness.services.turns.listener
        while not (listener.listening and listener._waiters.get(max_.user_id)):  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        answered = await max_.user.post("/v1/components/call_h1:q1/answer",
                                        json={"selected": ["keep"]})
        assert answered.status_code == 200, answered.text
        claimed = await asyncio.wait_for(waiting, 20)
        assert claimed.status_code == 200, claimed.text
        assert claimed.json()["turn"]["thread_id"] == thread
        delivered = await drained(heard, other)
        assert [json.loads(h)["u"] for h in delivered["maxclaw_rev"]] == [
            max_.user_id, max_.user_id]  # the answer's, then the claim's
        assert delivered["maxclaw_turn"] == [max_.user_id]
        async with harness.services.db.connection() as conn:
            assert tuple(await conn.fetchrow(OWED)) == ("", "")
