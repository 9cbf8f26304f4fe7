"""No lost updates: late commits, resumes under load, a killed listener, a slow client, and
the cost of the hot path (one read per batch, whatever the number of sockets)."""

from __future__ import annotations

import asyncio
import random
import secrets
import time
from functools import partial
from typing import Any

import asyncpg
import pytest
from websockets.exceptions import ConnectionClosed

from maxclaw.db.database import connect
from maxclaw.realtime import store
from maxclaw.realtime.cursor import Position, decode
from tests.cards import new_thread
from tests.realtime_support import Client, State, live_server, rest_state

INSERT_MESSAGE = """
INSERT INTO messages (user_id, thread_id, role, body) VALUES ($1::uuid, $2::uuid, 'user', $3)
RETURNING id, rev, xid::text AS xid
"""


async def db_revs(conn: asyncpg.Connection, user_id: str) -> dict[tuple[str, Any], int]:
    """The checker's truth: every record of the user and its latest rev, from the database."""
    rows = await conn.fetch("""
        SELECT 'threads' AS t, id::text AS id, NULL::bigint AS n, rev FROM threads
         WHERE user_id = $1::uuid
        UNION ALL SELECT 'messages', NULL, id, rev FROM messages WHERE user_id = $1::uuid
        UNION ALL SELECT 'decisions', NULL, id, rev FROM decisions WHERE user_id = $1::uuid
    """, user_id)
    return {(r["t"], r["id"] if r["t"] == "threads" else r["n"]): r["rev"] for r in rows}


def held_revs(state: State) -> dict[tuple[str, Any], int]:
    return {key: record["rev"] for key, record in state.items()}


async def wait_for_revs(client: Client, conn: asyncpg.Connection, user_id: str,
                        wait_s: float = 20) -> None:
    """Read until the client holds exactly the database's (record, latest rev) set."""
    truth = await db_revs(conn, user_id)
    try:
        await client.until(lambda: held_revs(client.state) == truth, wait_s)
    except TimeoutError:
        held = held_revs(client.state)
        missing = {k: v for k, v in truth.items() if held.get(k) != v}
        extra = held.keys() - truth.keys()
        pytest.fail(f"{len(missing)} records missing or stale (e.g. "
                    f"{list(missing.items())[:5]}), {len(extra)} extra")


class Load:
    """Writers on their own connections: inserts and updates of threads and messages, some
    transactions held open a while (so commits land out of rev order), some without NOTIFY."""

    def __init__(self, url: str, users: dict[str, list[str]], *, writers: int = 4,
                 quiet_share: float = 0.2, seed: int = 7) -> None:
        self.url = url
        self.users = users  # user id -> thread ids
        self.writers = writers
        self.quiet_share = quiet_share
        self.seed = seed
        self.stop = asyncio.Event()
        self.commits = 0
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._writer(i)) for i in range(self.writers)]

    async def finish(self) -> None:
        self.stop.set()
        await asyncio.gather(*self._tasks)

    async def wait_commits(self, n: int, wait_s: float = 20) -> None:
        deadline = time.monotonic() + wait_s
        target = self.commits + n
        while self.commits < target:
            assert time.monotonic() < deadline, "the load stalled"
            await asyncio.sleep(0.01)

    async def _writer(self, index: int) -> None:
        rng = random.Random(self.seed * 100 + index)
        conn = await connect(self.url)
        try:
            while not self.stop.is_set():
                try:
                    await self._transaction(conn, rng)
                    self.commits += 1
                except asyncpg.DeadlockDetectedError:
                    pass  # two writers updated the same rows in opposite orders; rolled back
        finally:
            await conn.close()

    async def _transaction(self, conn: asyncpg.Connection, rng: random.Random) -> None:
        user = rng.choice(list(self.users))
        threads = self.users[user]
        created: list[str] = []
        async with conn.transaction():
            if rng.random() < self.quiet_share:
                await conn.execute("SET LOCAL maxclaw.notify = 'off'")
            for _ in range(rng.randint(1, 3)):
                op = rng.random()
                if op < 0.55:
                    await conn.execute(INSERT_MESSAGE, user, rng.choice(threads),
                                       f"load {rng.random()}")
                elif op < 0.8:
                    await conn.execute("""
                        UPDATE messages SET display = jsonb_build_object('n', $2::int)
                         WHERE id = (SELECT id FROM messages WHERE thread_id = $1::uuid
                                      ORDER BY id DESC LIMIT 1)""",
                                       rng.choice(threads), rng.randint(0, 10**6))
                elif op < 0.97:
                    await conn.execute("UPDATE threads SET title = $2 WHERE id = $1::uuid",
                                       rng.choice(threads), f"title {rng.random()}")
                else:
                    created.append(await conn.fetchval(
                        "INSERT INTO threads (user_id, kind, title) VALUES ($1::uuid, 'normal',"
                        " 'new') RETURNING id::text", user))
            if rng.random() < 0.3:
                # work inside the transaction: its rev is taken now, its commit comes later
                await asyncio.sleep(rng.uniform(0, 0.03))
        threads.extend(created)  # other writers may use it once it is committed


def holds_keys(client: Client, keys: set[tuple[str, Any]]) -> bool:
    return keys <= client.state.keys()


def has_a_message(client: Client) -> bool:
    return any(key[0] == "messages" for key in client.state)


async def test_a_late_commit_is_never_passed(database_url: str) -> None:
    """A takes a rev and stays open while B commits a later one. Guarantee: no client is sent
    B, nor given a cursor past A, until A commits; then both arrive, A first."""
    async with live_server(database_url, realtime_poll_s=0.1) as srv:
        max_ = await srv.user("max")
        tid = await new_thread(max_.http)
        client = await srv.client(max_.token)
        await client.subscribe(None)
        late, other = await connect(database_url), await connect(database_url)
        try:
            tx = late.transaction()
            await tx.start()
            a = await late.fetchrow(INSERT_MESSAGE, max_.user_id, tid, "A, committed late")
            b = await other.fetchrow(INSERT_MESSAGE, max_.user_id, tid, "B, committed first")
            assert b["rev"] > a["rev"]
            assert int(b["xid"]) > int(a["xid"])
            await srv.services.realtime.sync()  # a batch that began after B's commit has run
            await client.drain()
            assert ("messages", b["id"]) not in client.state
            assert client.cursor is not None
            assert decode(client.cursor) <= Position(int(a["xid"]), 0)
            cursor_while_open = client.cursor
            newcomer = await srv.client(max_.token)
            catch_up = await newcomer.subscribe(None)
            assert all(f["record"]["id"] != b["id"] for f in catch_up if f["table"] == "messages")
            assert newcomer.cursor is not None
            assert decode(newcomer.cursor) <= Position(int(a["xid"]), 0)
            await tx.commit()
            both = {("messages", a["id"]), ("messages", b["id"])}
            for c in (client, newcomer):
                await c.until(partial(holds_keys, c, both))
                ids = [f["record"]["id"] for f in c.frames
                       if f["type"] == "record.upsert" and f["table"] == "messages"]
                assert ids.index(a["id"]) < ids.index(b["id"])
            resumed = await srv.client(max_.token)
            await resumed.subscribe(cursor_while_open)  # then live, if the horizon holds back
            await resumed.until(partial(holds_keys, resumed, both))
            for c in (client, newcomer, resumed):
                await c.close()
        finally:
            await late.close()
            await other.close()


@pytest.mark.parametrize("pages", ["default", "tiny"])
async def test_100_resumes_under_concurrent_writes_miss_nothing(database_url: str,
                                                               pages: str) -> None:
    async with live_server(database_url, realtime_poll_s=0.1) as srv:
        if pages == "tiny":  # every read fills its page: the cursor must stop at the page's end
            srv.services.realtime.page_size = 3
            srv.services.realtime.catch_up_page_size = 2
        max_ = await srv.user("max")
        eve = await srv.user("eve")
        threads = {max_.user_id: [max_.main_thread_id] + [await new_thread(max_.http)
                                                           for _ in range(3)],
                   eve.user_id: [eve.main_thread_id]}
        load = Load(database_url, threads, writers=4)
        load.start()
        rng = random.Random(11)
        state: State = {}
        cursor: str | None = None
        received = 0
        try:
            await load.wait_commits(20)
            for _ in range(100):
                # max_queue=None: the client library keeps reading, so a graceful close is quick
                client = await srv.client(max_.token, max_queue=None)
                client.state = state  # one client, reconnecting: its state survives
                await client.send({"op": "subscribe", "cursor": cursor})
                positions: list[Position] = []
                for _ in range(rng.randint(0, 25)):  # leave mid-catch-up, or after some live
                    try:
                        frame = await client.recv(rng.uniform(0.005, 0.08))
                    except TimeoutError:
                        break
                    if "cursor" in frame:
                        positions.append(decode(frame["cursor"]))
                received += len(client.frames)
                # one connection's cursors only ever move forward
                assert positions == sorted(positions)
                cursor = client.cursor or cursor
                if rng.random() < 0.5:
                    await client.close()
                else:  # the network drops: no closing handshake at all
                    client.ws.transport.abort()
                    await client.ws.wait_closed()
        finally:
            await load.finish()
        assert load.commits > 100
        assert received > 100
        final = await srv.client(max_.token)
        final.state = state
        await final.subscribe(cursor)
        conn = await connect(database_url)
        try:
            await wait_for_revs(final, conn, max_.user_id)
        finally:
            await conn.close()
        await final.converge(await rest_state(max_.http))  # and every record as REST shows it
        await final.close()


# slow: 24 joiners catch up while four writers commit as fast as they can, so its length follows
# the machine's commit rate (50 s in CI, over 120 s with faster commits); `make test-slow` and
# the integration steps of .ci/run (PostgreSQL 15, PgBouncer, partitioned) run it
@pytest.mark.slow
@pytest.mark.timeout(360)
async def test_clients_joining_under_load_miss_nothing(database_url: str) -> None:
    """Sockets join (from scratch, or from another client's cursor and state) while the hub
    streams to an established one: each joiner's catch-up ends at its own snapshot, which may
    be older than the hub's last read, and the hub must read for it from there."""
    async with live_server(database_url, realtime_poll_s=0.05) as srv:
        max_ = await srv.user("max")
        threads = {max_.user_id: [await new_thread(max_.http) for _ in range(3)]}
        anchor = await srv.client(max_.token, max_queue=None)
        await anchor.subscribe(None)
        load = Load(database_url, threads, writers=4)
        load.start()
        joiners: list[Client] = []
        try:
            for i in range(24):
                await load.wait_commits(2)
                await anchor.drain()
                joiner = await srv.client(max_.token, max_queue=None)
                if i % 2:  # resume as the anchor would: its state and cursor, taken together
                    joiner.state = dict(anchor.state)
                    await joiner.subscribe(anchor.cursor)
                else:
                    await joiner.subscribe(None)
                joiners.append(joiner)
        finally:
            await load.finish()
        conn = await connect(database_url)
        try:
            for client in (anchor, *joiners):
                await wait_for_revs(client, conn, max_.user_id)
        finally:
            await conn.close()
        for client in (anchor, *joiners):
            await client.close()


async def listener_pid(conn: asyncpg.Connection) -> int | None:
    pid: int | None = await conn.fetchval(
        "SELECT pid FROM pg_stat_activity WHERE application_name = $1"
        " AND datname = current_database()", store.LISTENER_APP_NAME)
    return pid


async def test_a_killed_listener_catches_up_when_it_comes_back(database_url: str,
                                                              pg_server: str) -> None:
    """The LISTEN backend is terminated mid-load and cannot reconnect for a while; the writes
    made meanwhile send hints nobody hears. With the periodic tick set far away (30 s) and the
    re-reads of held users off, only the catch-up after the reconnect can deliver them, and it
    does, all of them."""
    async with live_server(database_url, realtime_poll_s=30) as srv:
        hub = srv.services.realtime
        hub.held_retry_first_s = hub._held_retry_s = 30  # the load holds transactions open
        max_ = await srv.user("max")
        threads = {max_.user_id: [await new_thread(max_.http) for _ in range(2)]}
        client = await srv.client(max_.token)
        await client.subscribe(None)
        own = await connect(database_url)  # stays connected through the lock-out below
        server = await asyncpg.connect(pg_server)  # ALTER DATABASE runs from another database
        dbname = await own.fetchval("SELECT current_database()")
        load = Load(database_url, threads, writers=3, quiet_share=0)
        load.start()
        try:
            await load.wait_commits(20)
            await client.until(lambda: len(client.frames) > 10)  # hints flow
            # keep the listener out: new connections to this database are refused for now
            await server.execute(f'ALTER DATABASE "{dbname}" ALLOW_CONNECTIONS false')
            pid = await listener_pid(own)
            assert pid is not None
            assert await own.fetchval("SELECT pg_terminate_backend($1)", pid)
            await load.wait_commits(30)  # written while nobody listens
            await load.finish()
            assert hub.listener_connects == 1
        finally:
            await load.finish()
            await server.execute(f'ALTER DATABASE "{dbname}" ALLOW_CONNECTIONS true')
            await server.close()
        try:
            await wait_for_revs(client, own, max_.user_id, wait_s=15)
            assert hub.listener_connects >= 2
            assert await listener_pid(own) not in (None, pid)
        finally:
            await own.close()
        await client.close()


async def test_a_transaction_in_another_database_holds_no_client_back(
        database_url: str, pg_server: str) -> None:
    """xids are cluster-wide, but only this database's transactions can write its tables."""
    async with live_server(database_url, realtime_poll_s=0.1) as srv:
        max_ = await srv.user("max")
        client = await srv.client(max_.token)
        await client.subscribe(None)
        elsewhere = await asyncpg.connect(pg_server)
        try:
            async with elsewhere.transaction():
                foreign_xid = int(await elsewhere.fetchval("SELECT pg_current_xact_id()::text"))
                tid = await new_thread(max_.http, title="not held back")
                await client.until(lambda: ("threads", tid) in client.state, wait_s=10)
                assert client.cursor is not None
                assert decode(client.cursor).xid > foreign_xid  # the horizon passed it
        finally:
            await elsewhere.close()
        await client.close()


async def read_until_closed(client: Client) -> ConnectionClosed:
    while True:
        try:
            await client.recv(30)
        except ConnectionClosed as closed:
            return closed


async def test_a_slow_client_is_closed_and_resumes_without_loss(database_url: str) -> None:
    async with live_server(database_url, realtime_poll_s=30) as srv:
        hub = srv.services.realtime
        hub.queue_max_chars = 100_000
        max_ = await srv.user("max")
        tid = await new_thread(max_.http)
        # max_queue=1: the client library stops reading the socket once one frame is buffered
        client = await srv.client(max_.token, max_queue=1)
        await client.subscribe(None)
        written = 0
        # one transaction per batch, until the hub gives up on the client (the kernel's socket
        # buffers absorb some megabytes first); the cap only guards against a hang
        while hub.metrics.slow_closes._value.get() == 0:
            assert written < 2_000, "the client was never closed"
            async with srv.services.db.transaction() as conn:
                for _ in range(10):
                    # incompressible: permessage-deflate would shrink repeated text to nothing
                    body = secrets.token_urlsafe(75_000)
                    await conn.execute(INSERT_MESSAGE, max_.user_id, tid, body)
            written += 10
            await hub.sync()
        closed = await read_until_closed(client)
        assert closed.rcvd is not None
        assert closed.rcvd.code == 4408
        assert "last cursor" in closed.rcvd.reason
        got = sum(1 for f in client.frames if f["type"] == "record.upsert"
                  and f["table"] == "messages")
        assert got < written  # cut off; it resumes from where it got to
        resumed = await srv.client(max_.token, max_queue=None)
        resumed.state = client.state
        await resumed.subscribe(client.cursor)
        await resumed.converge(await rest_state(max_.http))
        await resumed.close()


async def test_one_read_per_batch_whatever_the_number_of_sockets(
        database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[tuple[int, int]] = []  # (users in the read, statements it ran)
    real = store.read_changes

    async def counting(conn: asyncpg.Connection, users: Any, after: Position,
                       **kwargs: Any) -> store.Changes:
        statements: list[str] = []

        def log(record: Any) -> None:
            if not record.query.lstrip().upper().startswith(("BEGIN", "COMMIT")):
                statements.append(record.query)

        conn.add_query_logger(log)
        try:
            return await real(conn, users, after, **kwargs)
        finally:
            conn.remove_query_logger(log)
            reads.append((len(users), len(statements)))

    monkeypatch.setattr(store, "read_changes", counting)
    # hints in the commit, as the service ships: with MAXCLAW_HINTS_AFTER_COMMIT a transaction
    # owes one user's hint to its COMMIT and notifies the others' at the commit, so the three
    # users' hints may reach the hub as two batches (each read, still, for all its sockets)
    async with live_server(database_url, realtime_poll_s=30, hints_after_commit=False) as srv:
        hub = srv.services.realtime
        users = [await srv.user(name) for name in ("max", "eve", "ann")]
        clients = [await srv.client(u.token) for u in users for _ in range(10)]
        for c in clients:
            await c.subscribe(None)
        await hub.sync()
        reads.clear()
        async with srv.services.db.transaction() as conn:
            for u in users:
                await conn.execute(INSERT_MESSAGE, u.user_id, u.main_thread_id, "to everyone")
        for c in clients:
            await c.until(partial(has_a_message, c))
        assert reads, "the hub read nothing"
        assert len(reads) <= 2  # the hint's batch (and at most one more it coalesced)
        assert all(n_users == 3 for n_users, _ in reads)  # all sockets' users in one read
        assert all(n == 4 for _, n in reads)  # the horizon, then one query per table
        for c in clients:
            await c.close()


def users_read(hub: Any, reason: str) -> float:
    return float(hub.metrics.users_read.labels(reason)._value.get())


async def test_a_hint_reads_only_the_hinted_user(database_url: str) -> None:
    """With 20 users connected, a write for one of them is read for that user alone: a live
    batch costs what changed, not how many sockets are connected."""
    async with live_server(database_url, realtime_poll_s=30) as srv:
        hub = srv.services.realtime
        users = [await srv.user(f"user{i}") for i in range(20)]
        clients = [await srv.client(u.token) for u in users]
        for c in clients:
            await c.subscribe(None)
        await hub.sync()
        before = users_read(hub, "hint")
        async with srv.services.db.transaction() as conn:
            await conn.execute(INSERT_MESSAGE, users[3].user_id, users[3].main_thread_id, "hi")
        await clients[3].until(partial(has_a_message, clients[3]))
        assert users_read(hub, "hint") - before == 1
        for c in clients:
            await c.close()


async def test_a_transaction_is_one_hint_and_one_read(database_url: str) -> None:
    """Three messages written in one transaction reach Max's socket through one hint and one
    read: the rows' hints are identical (the user and the transaction, 0029), PostgreSQL
    delivers them once, and the hub reads him past the whole transaction."""
    async with live_server(database_url, realtime_poll_s=30) as srv:
        hub = srv.services.realtime
        max_ = await srv.user("max")
        client = await srv.client(max_.token)
        await client.subscribe(None)
        await hub.sync()
        hints, reads = hub.metrics.hints._value.get(), users_read(hub, "hint")
        async with srv.services.db.transaction() as conn:
            rows = [await conn.fetchrow(INSERT_MESSAGE, max_.user_id, max_.main_thread_id,
                                        f"message {i}") for i in range(3)]
        await client.until(partial(holds_keys, client, {("messages", r["id"]) for r in rows}), 5)
        assert hub.metrics.hints._value.get() - hints == 1
        assert users_read(hub, "hint") - reads == 1
        await client.close()


async def test_a_hint_held_back_by_an_older_transaction_is_read_when_that_commits(
        database_url: str) -> None:
    """Max's write commits while an older transaction (Eve's) is still open, so the read its
    hint starts cannot pass it yet. Max stays pending: when Eve's transaction commits, her
    hint's batch reads for Max too, and his message arrives without waiting for the tick."""
    async with live_server(database_url, realtime_poll_s=30) as srv:
        hub = srv.services.realtime
        max_, eve = await srv.user("max"), await srv.user("eve")
        watchers = {u.user_id: await srv.client(u.token) for u in (max_, eve)}
        for c in watchers.values():
            await c.subscribe(None)
        await hub.sync()
        older, newer = await connect(database_url), await connect(database_url)
        try:
            tx = older.transaction()
            await tx.start()
            eves = await older.fetchrow(INSERT_MESSAGE, eve.user_id, eve.main_thread_id, "old")
            maxs = await newer.fetchrow(INSERT_MESSAGE, max_.user_id, max_.main_thread_id, "new")
            await asyncio.sleep(0.3)  # the hint's batch runs, and cannot pass Eve's xid
            assert ("messages", maxs["id"]) not in watchers[max_.user_id].state
            await tx.commit()
            for user, row in ((max_, maxs), (eve, eves)):
                client = watchers[user.user_id]
                await client.until(partial(holds_keys, client, {("messages", row["id"])}), 5)
        finally:
            await older.close()
            await newer.close()
        for c in watchers.values():
            await c.close()


async def test_a_hint_held_back_by_a_silent_transaction_is_read_soon_after_it_ends(
        database_url: str) -> None:
    """The older transaction holding Max's hint back writes nothing the stream carries (a
    job's bookkeeping), so its commit sends no hint. Max's message still arrives as soon as it
    ends: a held user is read again on a short backoff, not at the next tick (30 s here)."""
    async with live_server(database_url, realtime_poll_s=30) as srv:
        hub = srv.services.realtime
        max_ = await srv.user("max")
        watcher = await srv.client(max_.token)
        await watcher.subscribe(None)
        await hub.sync()
        older, newer = await connect(database_url), await connect(database_url)
        try:
            tx = older.transaction()
            await tx.start()
            await older.fetchval("SELECT pg_current_xact_id()")  # holds an xid, hints nothing
            row = await newer.fetchrow(INSERT_MESSAGE, max_.user_id, max_.main_thread_id, "new")
            await asyncio.sleep(0.3)  # the hint's batch runs, and cannot pass the older xid
            assert ("messages", row["id"]) not in watcher.state
            await tx.commit()
            await watcher.until(partial(holds_keys, watcher, {("messages", row["id"])}), 5)
        finally:
            await older.close()
            await newer.close()
        await watcher.close()
