"""The asyncpg pool and the one way services open transactions.

Only stores run SQL; services get a connection from ``Database.transaction()`` and hand it to
store functions, so everything one state change implies commits together or not at all.
Driver errors that mean "the database is not there" become ``Unavailable`` (503) here, at the
boundary, so no route ever reports a connection failure as a 500; a transaction PostgreSQL
aborted to break a deadlock (nothing of it stands) is a 503 too.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import asyncpg

from maxclaw.db.urls import plain_url
from maxclaw.errors import Invalid, Unavailable

log = logging.getLogger(__name__)

# Exceptions that mean the server or the connection is gone (not a bug in our SQL).
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    ConnectionError,
    TimeoutError,
    asyncpg.exceptions.ConnectionDoesNotExistError,
    asyncpg.exceptions.CannotConnectNowError,
    asyncpg.exceptions.ConnectionFailureError,
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.CrashShutdownError,
    asyncpg.exceptions.TooManyConnectionsError,
    asyncpg.exceptions.InterfaceError,
    asyncpg.exceptions.InternalClientError,
)


# A value the client sent that PostgreSQL cannot hold: an integer beyond int64, text with a NUL
# or an unpaired surrogate (asyncpg's client-side DataError, which subclasses InterfaceError),
# or the server refusing the characters. These are the client's 422, never a 503 or a 500.
UNSTORABLE_VALUE: tuple[type[BaseException], ...] = (
    asyncpg.exceptions._base.DataError,  # client side: the argument could not be encoded
    asyncpg.exceptions.DataError,  # SQLSTATE class 22, "data exception" (and its subclasses)
)


# PostgreSQL broke a lock cycle (or a serialization conflict) by aborting this transaction:
# nothing it wrote stands, so the request may simply be retried — a 503, never a 500. Each
# is also a lock-order bug to fix (tests/reliability/test_races.py pins the ones found), so
# it is logged.
TRANSIENT_CONFLICTS: tuple[type[BaseException], ...] = (
    asyncpg.exceptions.DeadlockDetectedError,
    asyncpg.exceptions.SerializationError,
)


T = TypeVar("T")
# Statements left to finish after their caller went away (``finish_even_if_cancelled``): held
# here until done, since the event loop keeps only weak references to tasks.
_FINISHING: set[asyncio.Task[object]] = set()


async def finish_even_if_cancelled(call: Awaitable[T]) -> T:
    """Await ``call`` (a connection taken, a statement run, the connection given back); if the
    caller is cancelled meanwhile, the caller stops at once and the call runs on to its end,
    its result dropped.

    Cancelling a running asyncpg statement sends a CancelRequest: a new connection to
    PostgreSQL (a process forked for it), or through PgBouncer, whose Debian release (1.18)
    can exit on a cancel that races a disconnect ("bad client state: 0",
    pgbouncer/pgbouncer#801, fixed in 1.19) and take every replica's database with it. A
    short read whose reader has gone (a socket closed mid-catch-up) costs less finished."""
    task: asyncio.Task[T] = asyncio.ensure_future(call)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        if not task.done():
            _FINISHING.add(task)
            task.add_done_callback(_finished)
        raise


def _finished(task: asyncio.Task[object]) -> None:
    _FINISHING.discard(task)
    if not task.cancelled() and task.exception() is not None:  # retrieved: nobody awaits it
        log.debug("a statement finished after its caller left",
                  extra={"code": type(task.exception()).__name__})


def is_connection_error(exc: BaseException) -> bool:
    """Whether ``exc`` says the database is unreachable (retry later), not that a query is wrong."""
    return isinstance(exc, CONNECTION_ERRORS) and not isinstance(exc, UNSTORABLE_VALUE)


def _translate(exc: BaseException) -> Exception:
    """The service's own error for a driver error at the boundary (the value is not echoed:
    it may be a secret)."""
    if isinstance(exc, UNSTORABLE_VALUE):
        return Invalid.at(["body"], "a value cannot be stored: a number out of range, or text "
                                    "with a NUL character or an unpaired surrogate")
    if isinstance(exc, TRANSIENT_CONFLICTS):
        log.warning("transaction aborted by a lock conflict", extra={"error": type(exc).__name__})
        return Unavailable("A conflicting write aborted this one; nothing was written. Retry.")
    return Unavailable("The database is unavailable; retry shortly.")


class JsonText(str):
    """A value written out as JSON text already (``json.dumps``): the jsonb codec sends it as
    it is, so a 1 MiB value checked as text (the secret echo check) is not encoded twice."""

    __slots__ = ()


def _encode_json(value: object) -> str:
    return str(value) if isinstance(value, JsonText) else json.dumps(value)


async def _init_connection(conn: asyncpg.Connection) -> None:
    # jsonb in and out as Python objects; every store relies on this
    await conn.set_type_codec("jsonb", encoder=_encode_json, decoder=json.loads,
                              schema="pg_catalog")
    await conn.set_type_codec("json", encoder=json.dumps, decoder=json.loads,
                              schema="pg_catalog")


# A user's long reads may hold at most this fraction of the pool (at least one connection):
# 20 connections, 5 for one user's catch-ups and history pages at a time.
USER_SHARE_DIVISOR = 4


class _Share:
    """One user's slots of the pool, and how many of that user's reads hold or wait for one."""

    __slots__ = ("slots", "users")

    def __init__(self, slots: asyncio.Semaphore) -> None:
        self.slots = slots
        self.users = 0


class PooledConnection(asyncpg.Connection):  # type: ignore[misc]
    """A pool connection released without asyncpg's reset query.

    The default reset (``pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL``) is one
    more round trip on every release — measured as 1 of 12 statements per answer. Pooled
    connections never hold session state here: LISTEN uses dedicated connections, settings
    are ``SET LOCAL`` (the owed hints of ``HintingConnection``, a session setting, are sent and
    cleared by the COMMIT that owes them), and an open transaction is still rolled back by
    asyncpg itself.
    """

    def get_reset_query(self) -> str:
        return ""


# With MAXCLAW_HINTS_AFTER_COMMIT a transaction of the pool owes its NOTIFY hints to its COMMIT
# (0030_hints_after_commit): the BEGIN says so, so the triggers keep the hints in a session
# setting instead of NOTIFYing inside the transaction, whose commit would hold PostgreSQL's
# cluster-wide NOTIFY lock until its commit record is flushed (every user's notifying commits
# flushed one at a time); the COMMIT sends them in the same round trip, from a transaction of
# their own that writes no WAL. If the COMMIT fails, the rest of its query is not run and the
# rollback took the owed hints back. Keyed by the exact statements asyncpg's ``Transaction``
# sends (asyncpg 0.32; tests/integration/test_hints_after_commit.py fails if they change, and
# until then a transaction would simply notify inside itself, as without the setting).
HINTED_EDGES = {
    "BEGIN;": "BEGIN; SET LOCAL maxclaw.notify = 'after_commit';",
    "COMMIT;": "COMMIT; SELECT maxclaw_send_owed_hints();",
}


class HintingConnection(PooledConnection):
    """A pool connection whose transactions send their hints after their commit
    (``HINTED_EDGES``)."""

    # asyncpg's own signature, timeout included
    async def execute(self, query: str, *args: Any,
                      timeout: float | None = None) -> str:  # noqa: ASYNC109
        if not args:
            query = HINTED_EDGES.get(query, query)
        result: str = await super().execute(query, *args, timeout=timeout)
        return result


async def connect(url: str) -> asyncpg.Connection:
    """One standalone connection with the project's codecs (listeners, tests, tools).

    No statement cache: such a connection may go through PgBouncer in transaction mode (a
    tool given the pooled URL), where a named prepared statement does not outlive its
    transaction; listeners and tools run too few statements for the cache to matter."""
    conn = await asyncpg.connect(plain_url(url), statement_cache_size=0)
    await _init_connection(conn)
    return conn


def fetch_once(url: str, query: str, *args: Any) -> list[asyncpg.Record]:
    """One query on a connection of its own, from synchronous code (the start-up checks of
    ``serve`` and of every CLI command). asyncpg, not psycopg: the app never needs psycopg
    otherwise, and its import was 0.11-0.16 s of CPU in every process that made these checks
    (docs/benchmarks.md, issue 33 item 4, 2026-12-07 night). No codecs: the checks read plain
    columns. In a thread whose event loop is running (a caller inside async code), the query
    runs on a loop of its own in a worker thread."""

    async def run() -> list[asyncpg.Record]:
        conn = await asyncpg.connect(plain_url(url), statement_cache_size=0)
        try:
            return list(await conn.fetch(query, *args))
        finally:
            await conn.close()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(run())
    with ThreadPoolExecutor(max_workers=1) as worker:
        return worker.submit(asyncio.run, run()).result()


class Database:
    """A pool plus helpers; created in the app's lifespan and passed to every service."""

    def __init__(self, url: str, *, min_size: int = 2, max_size: int = 20,
                 command_timeout: float = 10.0, listen_url: str | None = None,
                 statement_cache_size: int = 100, hints_after_commit: bool = False) -> None:
        self.url = url
        # MAXCLAW_HINTS_AFTER_COMMIT: every transaction of the pool sends its hints after its
        # commit (``HintingConnection``), and ``writer()`` is a transaction
        self.hints_after_commit = hints_after_commit
        # LISTEN (and migrations' session lock) need a real session: behind PgBouncer in
        # transaction mode this is a direct URL (MAXCLAW_LISTEN_DATABASE_URL)
        self.listen_url = listen_url or url
        self._min = min_size
        self._max = max_size
        self._timeout = command_timeout
        # 0 behind PgBouncer (transaction mode): no named prepared statement outlives its
        # transaction; asyncpg then re-parses an unnamed statement with each execution
        self._statement_cache_size = statement_cache_size
        self._pool: asyncpg.Pool | None = None
        # called with the seconds each pool checkout waited (the pool-wait histogram)
        self.on_acquire: Callable[[float], None] | None = None
        # one user's share of the pool for the reads that can be long (``connection(share=)``)
        self.share = max(1, max_size // USER_SHARE_DIVISOR)
        self._shares: dict[str, _Share] = {}

    async def open(self) -> None:
        try:
            self._pool = await asyncpg.create_pool(
                plain_url(self.url), min_size=self._min, max_size=self._max,
                command_timeout=self._timeout, init=_init_connection,
                connection_class=(HintingConnection if self.hints_after_commit
                                  else PooledConnection),
                statement_cache_size=self._statement_cache_size)
        except CONNECTION_ERRORS as exc:
            raise Unavailable(f"database unreachable: {exc}") from exc

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    @property
    def pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise Unavailable("the database pool is not open")
        return self._pool

    @asynccontextmanager
    async def connection(self, *, share: str | None = None) -> AsyncIterator[asyncpg.Connection]:
        """A pooled connection in autocommit mode (one statement, one transaction).

        ``share`` (a user id) counts the connection against that user's share of the pool
        (``self.share`` at a time): a read that can be long (a realtime catch-up page, a page
        of history) waits for its own user's earlier reads, not everyone's, so one user's
        twenty sockets cannot hold every connection while other users wait."""
        async with self._user_share(share):
            try:
                began = time.perf_counter()
                async with self.pool.acquire() as conn:
                    self._acquired(began)
                    yield conn
            except (*CONNECTION_ERRORS, *UNSTORABLE_VALUE, *TRANSIENT_CONFLICTS) as exc:
                raise _translate(exc) from exc

    @asynccontextmanager
    async def _user_share(self, user: str | None) -> AsyncIterator[None]:
        if user is None:
            yield
            return
        share = self._shares.get(user)
        if share is None:
            share = self._shares[user] = _Share(asyncio.Semaphore(self.share))
        share.users += 1
        try:
            async with share.slots:
                yield
        finally:
            share.users -= 1
            if not share.users:  # no one of this user reads or waits: forget the user
                del self._shares[user]

    @asynccontextmanager
    async def writer(self) -> AsyncIterator[asyncpg.Connection]:
        """A connection for a write that is one statement (with reads before it): autocommit,
        the cheapest; a transaction when hints go after the commit, since only a transaction
        can say so before its writes and send them after its commit (``HINTED_EDGES``: two
        more round trips; what they cost and free, by disk: docs/operations.md, "Hints after
        the commit")."""
        if self.hints_after_commit:
            async with self.transaction() as conn:
                yield conn
        else:
            async with self.connection() as conn:
                yield conn

    @asynccontextmanager
    async def transaction(self, *, notify: bool = True) -> AsyncIterator[asyncpg.Connection]:
        """A pooled connection inside one transaction: commit on success, roll back on error.

        With ``hints_after_commit`` its hints are sent right after its commit, in the COMMIT's
        round trip (``HINTED_EDGES``).
        ``notify=False`` skips the rev trigger's NOTIFY hint for this transaction (the listener's
        periodic catch-up still finds its rows).
        """
        try:
            began = time.perf_counter()
            async with self.pool.acquire() as conn, conn.transaction():
                self._acquired(began)
                if not notify:
                    await conn.execute("SET LOCAL maxclaw.notify = 'off'")
                yield conn
        except (*CONNECTION_ERRORS, *UNSTORABLE_VALUE, *TRANSIENT_CONFLICTS) as exc:
            raise _translate(exc) from exc

    def _acquired(self, began: float) -> None:
        if self.on_acquire is not None:
            self.on_acquire(time.perf_counter() - began)

    async def ping(self) -> bool:
        """One round trip; False when it fails."""
        try:
            async with self.pool.acquire(timeout=2.0) as conn:
                await conn.fetchval("SELECT 1", timeout=2.0)
            return True
        except (Unavailable, *CONNECTION_ERRORS, asyncpg.PostgresError):
            return False
