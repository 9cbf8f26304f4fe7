"""The operator CLI: ``maxclaw serve | migrate | sweep | user create | token create | …``.

Every command takes ``--database-url`` (or ``MAXCLAW_DATABASE_URL``; the flag wins). With
neither, commands use the embedded PostgreSQL in ``MAXCLAW_DATA_DIR``.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import signal
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, cast

import typer

from maxclaw.settings import Settings

if TYPE_CHECKING:  # the CLI imports the server lazily, per command, to start fast
    from maxclaw.auth.service import AuthService, Role
    from maxclaw.composition import Services
    from maxclaw.db.database import Database
    from maxclaw.housekeeping.users import UserHousekeeping
    from maxclaw.secrets.keyring import Keyring

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="MaxClaw rich messages: non-blocking questions for AI agents.")
user_app = typer.Typer(no_args_is_help=True, help="Manage users.")
token_app = typer.Typer(no_args_is_help=True, help="Manage API tokens.")
app.add_typer(user_app, name="user")
app.add_typer(token_app, name="token")
db_app = typer.Typer(no_args_is_help=True,
                     help="Database layout (the partitioned stand-in) and roles.")
app.add_typer(db_app, name="db")

DatabaseUrl = Annotated[str | None, typer.Option(
    "--database-url", help="PostgreSQL URL (default: MAXCLAW_DATABASE_URL, else embedded).")]
T = TypeVar("T")
S = TypeVar("S")


def fail(message: str, code: int = 1) -> None:
    """One clear line on stderr and a non-zero exit — never a traceback."""
    typer.echo(f"maxclaw: {message}", err=True)
    raise typer.Exit(code)


@contextmanager
def database(settings: Settings, url: str | None) -> Iterator[tuple[str, bool]]:
    """Yield ``(url, embedded)``: the given URL, or the embedded server (stopped on exit)."""
    url = url or settings.database_url
    if url:
        yield url, False
        return
    from maxclaw.db.embedded import EmbeddedPostgres

    embedded = EmbeddedPostgres(settings.data_dir)
    _unwind_on_sigterm()
    try:
        started = embedded.start()
    except Exception as exc:  # the wheel's own errors are varied; report one line
        fail(f"could not start the embedded PostgreSQL in {settings.data_dir}: {exc}")
        return
    try:
        yield started, True
    finally:
        embedded.stop()


def _unwind_on_sigterm() -> None:
    """Make SIGTERM (docker stop, systemd, kill) unwind like Ctrl-C, so ``database()`` stops
    the embedded server. Python's default SIGTERM kills the process outright, and uvicorn
    re-raises the signal after its graceful shutdown, which would orphan the postgres."""

    def unwind(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, unwind)


def migrate_or_fail(url: str) -> None:
    from maxclaw.db import migrate
    from maxclaw.db.urls import redact

    try:
        migrate.upgrade(url)
    except Exception as exc:
        import psycopg  # alembic's driver; imported by the failed upgrade already

        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        # at head, upgrading changes nothing and works as the service's DDL-less role; behind
        # it, that role is refused: say who may migrate
        if isinstance(getattr(exc, "orig", exc), psycopg.errors.InsufficientPrivilege):
            reason += ("; this role may not change the schema: run `maxclaw migrate` as the "
                       "schema's owner (MAXCLAW_MIGRATE_DATABASE_URL)")
        fail(f"cannot migrate the database at {redact(url)}: {reason}")


def _with_pool(url: str, max_size: int, build: Callable[[Settings, Database], S],
               stop: Callable[[S], Awaitable[None]], work: Callable[[S], Awaitable[T]]) -> T:
    """Open a pool, ``build`` what the command uses, run ``work`` on it, ``stop`` it and close
    the pool. A refusal (``MaxclawError``) becomes one line on stderr and exit 1."""
    from maxclaw.errors import MaxclawError
    from maxclaw.ops.services import database_for

    settings = Settings(database_url=url)

    async def main() -> T:
        db = database_for(settings, min_size=1, max_size=max_size)
        await db.open()
        built = build(settings, db)
        try:
            return await work(built)
        finally:
            await stop(built)
            await db.close()

    try:
        return asyncio.run(main())
    except MaxclawError as exc:
        fail(exc.message + _driver_cause(exc, settings))
        raise  # unreachable; keeps the type checker honest


def _driver_cause(exc: BaseException, settings: Settings) -> str:
    """For an operator, what the driver said under a 503's words: "unavailable" covers a
    server that is gone, one that refused a connection, and a statement that outlived the
    command timeout, and each has its own remedy. The exception's class only: its text may
    quote a value."""
    cause = exc.__cause__
    if cause is None:
        return ""
    if isinstance(cause, TimeoutError):
        # a statement past the command timeout, almost always; a connection the pool opens
        # on checkout (to replace a closed one) times out as TimeoutError too, after
        # asyncpg's own 60 s
        return (f" (no answer within {settings.db_command_timeout_s:g} s, "
                "MAXCLAW_DB_COMMAND_TIMEOUT_S, or no connection within 60 s)")
    return f" ({type(cause).__name__})"


def run_async(url: str, work: Callable[[Services], Awaitable[T]]) -> T:
    """Build every service (the composition root) and run ``work(services)``."""
    from maxclaw.composition import build_services
    from maxclaw.metrics import Metrics

    # the listener is opened if ``work`` waited on a channel
    return _with_pool(url, 4, lambda settings, db: build_services(settings, db, Metrics()),
                      lambda services: services.listener.stop(), work)


@dataclass(frozen=True, slots=True)
class Accounts:
    """What the user and token commands use. Built alone, not by the composition root:
    importing and building every service cost about 0.5 s of CPU per command, and operators'
    scripts (and the test suite, some 80 runs) start these commands one process each."""

    auth: AuthService
    users: UserHousekeeping


def run_accounts(url: str, work: Callable[[Accounts], Awaitable[T]]) -> T:
    """``run_async`` for the user and token commands: a small pool and the two services."""
    from maxclaw.auth.service import AuthService
    from maxclaw.housekeeping.users import UserHousekeeping

    def build(_settings: Settings, db: Database) -> Accounts:
        # no LISTEN connection: AuthService opens one only to authenticate, which no command
        # does; a revoke reaches the replicas by the NOTIFY its own transaction sends
        return Accounts(AuthService(db), UserHousekeeping(db))

    async def stop(accounts: Accounts) -> None:
        await accounts.auth.revocations.listener.stop()  # in case something authenticated

    return _with_pool(url, 2, build, stop, work)


WS_MAX_FRAME_BYTES = 64 * 1024


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Bind address.")] = None,
    port: Annotated[int | None, typer.Option(help="Port.")] = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Apply migrations and serve the API, WebSocket and WebUI; run the sweeper and push."""
    import uvicorn

    from maxclaw.app import create_app
    from maxclaw.headertimeout import http_protocol
    from maxclaw.logs import configure_logging

    settings = Settings()
    configure_logging(settings.log_level, settings.log_json, settings.log_library_level)
    with database(settings, database_url) as (url, embedded):
        if not _database_answers(url):
            return
        keyring, legacy = _keys_or_fail(settings, url, embedded)
        migrate_or_fail(migration_url(settings, url))
        settings = settings.model_copy(update={
            "database_url": url, "host": host or settings.host, "port": port or settings.port})
        if legacy:
            _seal_legacy(url, keyring)
        if embedded:
            _first_run_hint(settings)
        else:
            _warn_if_privileged(url)
        # uvicorn's own "running on" line is at INFO on a library logger, quiet by default
        logging.getLogger("maxclaw").info(
            "serving", extra={"url": f"http://{settings.host}:{settings.port}"})
        served = create_app(settings)
        # Everything made so far (modules, classes, pydantic's schemas, the routes: ~100,000
        # objects) lives as long as the process: out of the collector's sight, a full
        # collection under load walks only what requests made since, not all of it again
        # (a ~60 ms pause of the event loop, now ~26 ms; docs/benchmarks.md, issue 33).
        gc.freeze()
        # ws_max_size: the protocol's frames are small (api.md: 64 KiB), not uvicorn's 16 MiB;
        # http: uvicorn's protocol with a header read timeout (slowloris, headertimeout.py)
        uvicorn.run(served, host=settings.host, port=settings.port,
                    log_config=None, ws="websockets-sansio", lifespan="on",
                    ws_max_size=WS_MAX_FRAME_BYTES,
                    # no permessage-deflate: it compresses every frame on the event loop (about
                    # 25 MB/s here), so one user's catch-up of 16 MiB held the loop 0.5 s and
                    # twenty of them moved another user's p99 from 2 to 190 ms
                    ws_per_message_deflate=False,
                    http=http_protocol(settings.header_timeout_s),
                    # X-Forwarded-For only from the configured proxy (uvicorn would believe
                    # any local peer by default, and a prober could pick its address)
                    proxy_headers=bool(settings.forwarded_allow_ips),
                    forwarded_allow_ips=settings.forwarded_allow_ips or None)


def _warn_if_privileged(url: str) -> None:
    """A warning at start when serve's role could change the schema (it needs data rights
    only); the embedded database of a first run is the developer's own, and is not judged."""
    from maxclaw.db.roles import privileged_role

    try:
        why = privileged_role(url)
    except Exception as exc:  # a check that cannot run must not stop serve
        logging.getLogger("maxclaw").warning(
            "could not check serve's database role", extra={"error": type(exc).__name__})
        return
    if why:
        logging.getLogger("maxclaw").warning(why)


def _database_answers(url: str) -> bool:
    from maxclaw.db.database import fetch_once
    from maxclaw.db.urls import redact

    try:
        fetch_once(url, "SELECT 1")
        return True
    except Exception as exc:
        fail(f"cannot reach the database at {redact(url)}: {exc}")
        return False


def _keys_or_fail(settings: Settings, url: str, embedded: bool) -> tuple[Keyring, bool]:
    """Refuse to start without the keys every live secret row needs (one line why), before
    anything else is printed; on the embedded database's first start, create the key file and
    say where it is. Also says whether old plaintext secret answers wait to be sealed."""
    from maxclaw.secrets.keyring import KeyringError, load_keyring
    from maxclaw.secrets.service import missing_keys

    try:
        keyring, created = load_keyring(settings.secret_key, settings.secret_key_file,
                                        settings.data_dir, create=embedded)
        reason, legacy = asyncio.run(missing_keys(url, keyring))
    except KeyringError as exc:
        fail(exc.message)
        raise  # unreachable
    if reason:
        fail(reason)
    if created is not None:
        typer.echo(f"Created the secret key file {created} (owner-only). Back it up with the "
                   "database: secret answers sealed under a lost key cannot be read.", err=True)
    return keyring, legacy


def _seal_legacy(url: str, keyring: Keyring) -> None:
    """Seal secret answers stored in plaintext before secrets were encrypted."""

    async def seal(services: Services) -> None:
        services.secrets.use(keyring)
        await services.secrets.seal_legacy()

    run_async(url, seal)


def _first_run_hint(settings: Settings) -> None:
    """With the embedded database: on the first start, create the user ``max`` and print a
    WebUI link with a sign-in token; on later starts, say how to get one. (Minting a token on
    every start would leave a new never-expiring credential in every terminal and log.)"""
    from maxclaw.errors import Conflict

    async def first_token(services: Services) -> str | None:
        try:
            await services.auth.create_user("max")
        except Conflict:  # not the first start
            return None
        token: str = await services.auth.create_token("max", "user")
        return token

    assert settings.database_url
    token = run_async(settings.database_url, first_token)
    base = f"http://{settings.host}:{settings.port}/"
    if token is not None:
        typer.echo(f"MaxClaw is starting with the embedded database in {settings.data_dir}.\n"
                   f"  Open the WebUI: {base}#token={token}\n"
                   f"  More tokens:    maxclaw token create --user max --role user|agent",
                   err=True)
    else:
        typer.echo(f"MaxClaw is starting with the embedded database in {settings.data_dir}.\n"
                   f"  WebUI: {base} (sign in with the link from the first start, or a new\n"
                   f"  token: maxclaw token create --user max --role user, then open\n"
                   f"  {base}#token=<token>)", err=True)


@app.command()
def migrate(
    database_url: DatabaseUrl = None,
    check: Annotated[bool, typer.Option(
        "--check", help="Change nothing; exit 0 when the database is at this code's head, "
                        "2 when it is behind, 3 when it is ahead.")] = False,
) -> None:
    """Apply every migration (``alembic upgrade head``), or only compare (``--check``)."""
    settings = Settings()
    with database(settings, database_url) as (url, _):
        if check:
            _check_schema(migration_url(settings, url))
            return
        owner = migration_url(settings, url)
        migrate_or_fail(owner)
        typer.echo("migrated to head")
        if settings.app_role:  # the service's DDL-less role follows every migration
            _grant_or_fail(owner, settings.app_role, settings.app_role_password)


def _grant_or_fail(owner_url: str, role: str, password: str | None) -> None:
    from maxclaw.db.roles import RoleError, grant_app_role
    from maxclaw.db.urls import redact

    try:
        granted = grant_app_role(owner_url, role, password)
    except RoleError as exc:
        fail(str(exc))
        return
    except Exception as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        fail(f"cannot grant role {role!r} at {redact(owner_url)}: {reason}")
        return
    typer.echo(f"role {role}: {'created, ' if granted.created else ''}data rights only "
               f"(no DDL){'' if granted.read_all_stats else '; pg_read_all_stats not granted'}")


@db_app.command("grant-app-role")
def db_grant_app_role(
    role: Annotated[str | None, typer.Argument(
        help="The service's role (default: MAXCLAW_APP_ROLE).")] = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Create (if missing) the role `serve` connects as and grant it rows only: SELECT,
    INSERT, UPDATE, DELETE, sequences, no DDL. Run as the schema's owner
    (MAXCLAW_MIGRATE_DATABASE_URL, else --database-url); the password, if any, comes from
    MAXCLAW_APP_ROLE_PASSWORD. Idempotent; `maxclaw migrate` does it too when
    MAXCLAW_APP_ROLE is set."""
    settings = Settings()
    role = role or settings.app_role
    if not role:
        fail("name the role: maxclaw db grant-app-role ROLE (or MAXCLAW_APP_ROLE)")
        return
    with database(settings, database_url) as (url, _):
        owner = migration_url(settings, url)
        migrate_or_fail(owner)
        _grant_or_fail(owner, role, settings.app_role_password)


def direct_url(settings: Settings, url: str) -> str:
    """The direct URL when the main one goes through a pooler (the migration lock is a
    session lock, which PgBouncer's transaction mode does not keep)."""
    if settings.listen_database_url and url == settings.database_url:
        return settings.listen_database_url
    return url


def migration_url(settings: Settings, url: str) -> str:
    """Where schema changes run: ``MAXCLAW_MIGRATE_DATABASE_URL`` (the schema's owner) for the
    configured database, else the direct URL. ``serve``'s own role may have no DDL rights."""
    if settings.migrate_database_url and url == settings.database_url:
        return settings.migrate_database_url
    return direct_url(settings, url)


def _check_schema(url: str) -> None:
    from maxclaw.db.urls import redact
    from maxclaw.ops.schema_check import EXIT_CODES, status

    try:
        result = status(url)
    except Exception as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        fail(f"cannot read the schema version at {redact(url)}: {reason}")
        return
    typer.echo(json.dumps({"state": result.state, "database": result.database,
                           "code": result.code}))
    if result.state != "current":
        typer.echo(f"maxclaw: {result.message()}", err=True)
    raise typer.Exit(EXIT_CODES[result.state])


@db_app.command("partition")
def db_partition(
    database_url: DatabaseUrl = None,
    partitions: Annotated[int, typer.Option(
        "--partitions", help="Hash partitions by user_id for each user-owned table.")] = 8,
) -> None:
    """Migrate, then rebuild every user-owned table as PARTITION BY HASH (user_id): the local
    stand-in for a database distributed by user (docs/scaling.md). Empty databases only."""
    from maxclaw.ops.partition import PartitionError, partition_counts, partition_database

    settings = Settings()
    with database(settings, database_url) as (url, _):
        target = migration_url(settings, url)
        migrate_or_fail(target)
        try:
            partition_database(target, partitions)
        except PartitionError as exc:
            fail(str(exc))
        typer.echo(json.dumps({"partitioned": partition_counts(target)}))


@app.command()
def prune(
    database_url: DatabaseUrl = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Count what would be deleted; delete nothing.")] = False,
) -> None:
    """Delete rows past their retention (MAXCLAW_RETENTION_*_DAYS); prints rows per rule."""
    from maxclaw.ops.retention import Pruner

    settings = Settings()
    with database(settings, database_url) as (url, _):
        migrate_or_fail(migration_url(settings, url))

        async def work(services: Services) -> dict[str, int] | None:
            pruner = Pruner(services.db, services.settings, services.clock, services.metrics)
            return await pruner.prune(dry_run=dry_run)

        result = run_async(url, work)
        if result is None:
            fail("another process is pruning this database right now; try again later")
        typer.echo(json.dumps({"dry_run": dry_run, "rows": result}))


@app.command()
def sweep(database_url: DatabaseUrl = None) -> None:
    """One due-sweep pass; prints ``{"handed_to_main": n, "kept_open": n}``."""
    settings = Settings()
    with database(settings, database_url) as (url, _):
        migrate_or_fail(migration_url(settings, url))

        async def work(services: Services) -> dict[str, int]:
            result: dict[str, int] = await services.components.sweep_due_all()
            return result

        typer.echo(json.dumps(run_async(url, work)))


@app.command("restore-finish")
def restore_finish(database_url: DatabaseUrl = None) -> None:
    """After restoring a pg_dump, before serving: restamp the synced rows so clients holding
    cursors from before the restore get a full snapshot, not a gap (docs/operations.md)."""
    from maxclaw.db.urls import redact
    from maxclaw.ops.restore import finish_restore

    settings = Settings()
    with database(settings, database_url) as (url, _):
        url = migration_url(settings, url)  # it alters triggers and sets a sequence
        migrate_or_fail(url)
        try:
            counts = asyncio.run(finish_restore(url))
        except Exception as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            fail(f"cannot finish the restore at {redact(url)}: {reason}")
            return
        typer.echo(json.dumps({"restamped": counts}))


@user_app.command("create")
def user_create(name: str, database_url: DatabaseUrl = None,
                as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Create a user and its Main thread."""
    settings = Settings()
    with database(settings, database_url) as (url, _):
        migrate_or_fail(migration_url(settings, url))

        async def work(services: Accounts) -> tuple[str, str]:
            result: tuple[str, str] = await services.auth.create_user(name)
            return result

        user_id, main_id = run_accounts(url, work)
        if as_json:
            typer.echo(json.dumps({"user_id": user_id, "main_thread_id": main_id}))
        else:
            typer.echo(f"user {name}: {user_id} (Main thread {main_id})")


USER_LIST_COLUMNS = ("name", "id", "created_at", "threads", "tokens", "devices",
                     "running_turns")


@user_app.command("list")
def user_list(database_url: DatabaseUrl = None,
              as_json: Annotated[bool, typer.Option(
                  "--json", help='Print {"users": [{"id", "name", "created_at", "threads", '
                                 '"tokens", "devices", "running_turns"}]}.')] = False) -> None:
    """List users with how many threads, tokens and devices each has."""
    settings = Settings()
    with database(settings, database_url) as (url, _):
        migrate_or_fail(migration_url(settings, url))

        async def work(services: Accounts) -> list[dict[str, Any]]:
            return await services.users.list()

        rows = run_accounts(url, work)
        if as_json:
            typer.echo(json.dumps({"users": rows}, default=_iso))
            return
        _print_table(USER_LIST_COLUMNS, rows)


@user_app.command("delete")
def user_delete(name: str, database_url: DatabaseUrl = None,
                force: Annotated[bool, typer.Option(
                    "--force", help="Delete even while a turn of theirs is running.")] = False,
                ) -> None:
    """Delete a user and everything of theirs (threads, messages, cards, secrets, tokens,
    devices), in one transaction."""
    settings = Settings()
    with database(settings, database_url) as (url, _):
        migrate_or_fail(migration_url(settings, url))

        async def work(services: Accounts) -> str:
            return await services.users.delete(name, force=force)

        user_id = run_accounts(url, work)  # a refusal is one line on stderr, exit 1
        typer.echo(f"deleted user {name} ({user_id})")


def _print_table(columns: tuple[str, ...], rows: list[dict[str, Any]]) -> None:
    table = [list(columns)] + [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
    for line in table:
        typer.echo("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True))
                   .rstrip())


@token_app.command("create")
def token_create(
    user: Annotated[str, typer.Option("--user", help="The user's name.")],
    role: Annotated[str, typer.Option("--role", help="user or agent.")],
    thread: Annotated[str | None, typer.Option("--thread", help="Bind an agent token.")] = None,
    for_main: Annotated[bool, typer.Option(
        "--for-main", help="An unbound agent token that may also write in the Main thread "
                           "(the runtime that runs Main); other agent tokens may not.")] = False,
    expires_in: Annotated[float | None, typer.Option(
        "--expires-in", metavar="DAYS", max=36_500,
        help="Expire the token after this many days, fractions allowed (default: never).")
    ] = None,
    database_url: DatabaseUrl = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Mint a token (printed once; only its hash is stored)."""
    from datetime import UTC, datetime, timedelta

    if expires_in is not None and expires_in <= 0:
        fail("--expires-in takes a number of days above 0 (e.g. 30, or 0.5 for 12 hours)")
    settings = Settings()
    expires_at = None if expires_in is None else datetime.now(UTC) + timedelta(days=expires_in)
    with database(settings, database_url) as (url, _):
        migrate_or_fail(migration_url(settings, url))

        async def work(services: Accounts) -> str:
            # the service checks the role and says what is allowed; the CLI passes it through
            token: str = await services.auth.create_token(user, cast("Role", role), thread,
                                                          expires_at=expires_at,
                                                          for_main=for_main)
            return token

        token = run_accounts(url, work)
        typer.echo(json.dumps({"token": token}) if as_json else token)


TOKEN_LIST_COLUMNS = ("id", "user", "role", "thread_id", "for_main", "created_at",
                      "expires_at", "last_used_at")


def _iso(value: Any) -> str:
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    return value.isoformat(timespec="seconds") if hasattr(value, "isoformat") else str(value)


@token_app.command("list")
def token_list(
    user: Annotated[str | None, typer.Option("--user", help="Only this user's tokens.")] = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help='Print {"tokens": [{"id", "user", "role", "thread_id", "created_at", '
                       '"last_used_at", "expires_at", …}]}.')] = False,
    database_url: DatabaseUrl = None,
) -> None:
    """List tokens (id, user, role, binding, created, expires, last used); never the tokens."""
    settings = Settings()
    with database(settings, database_url) as (url, _):
        migrate_or_fail(migration_url(settings, url))

        async def work(services: Accounts) -> list[dict[str, Any]]:
            rows: list[dict[str, Any]] = await services.auth.list_all_tokens(user)
            return rows

        rows = [{k: v for k, v in row.items() if k != "current"} for row in run_accounts(url, work)]
        if as_json:
            typer.echo(json.dumps({"tokens": rows}, default=_iso))
            return
        table = [list(TOKEN_LIST_COLUMNS)] + [[_cell(r.get(c)) for c in TOKEN_LIST_COLUMNS]
                                              for r in rows]
        widths = [max(len(line[i]) for line in table) for i in range(len(TOKEN_LIST_COLUMNS))]
        for line in table:
            typer.echo("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True))
                       .rstrip())


@token_app.command("revoke")
def token_revoke(
    token_id: Annotated[int | None, typer.Argument(
        help="The token's id (maxclaw token list).", show_default=False)] = None,
    token: Annotated[str | None, typer.Option(
        "--token", help="The token itself, instead of its id.")] = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Revoke a token by id or by value: every replica refuses it at once and closes its
    WebSockets."""
    if (token_id is None) == (token is None):
        fail("token revoke takes a token id or --token TOKEN (one of them)")
    settings = Settings()
    with database(settings, database_url) as (url, _):
        migrate_or_fail(migration_url(settings, url))

        async def work(services: Accounts) -> int | None:
            if token is not None:
                return await services.auth.revoke_by_token(token)
            assert token_id is not None
            return token_id if await services.auth.revoke_any(token_id) else None

        revoked = run_accounts(url, work)
        if revoked is None:
            fail(f"no token {token_id}" if token is None else "no such token")
        typer.echo(f"revoked token {revoked}")


@app.command("push-worker")
def push_worker(database_url: DatabaseUrl = None) -> None:
    """Run the push dispatcher alone (no API) until Ctrl-C or SIGTERM."""
    from maxclaw.logs import configure_logging
    from maxclaw.push.worker import run_worker

    settings = Settings()
    configure_logging(settings.log_level, settings.log_json, settings.log_library_level)
    with database(settings, database_url) as (url, _):
        migrate_or_fail(migration_url(settings, url))
        run_async(url, lambda services: run_worker(services.push.dispatcher))


@app.command()
def agent(
    base_url: Annotated[str, typer.Option("--base-url", help="The MaxClaw server.")],
    token: Annotated[str, typer.Option("--token", envvar="MAXCLAW_AGENT_TOKEN",
                                       help="An agent token (maxclaw token create --role agent; "
                                            "--for-main to run Main's turns too).")],
    model: Annotated[str, typer.Option(
        "--model", help="openai (MAXCLAW_OPENAI_BASE_URL/_API_KEY/_MODEL) or scripted:FILE.")]
        = "openai",
    workspace: Annotated[str, typer.Option(help="Directory the local tools are confined to.")]
        = ".",
    runtime_id: Annotated[str | None, typer.Option("--runtime-id")] = None,
    once: Annotated[bool, typer.Option("--once", help="Run at most one turn, then exit.")]
        = False,
    wait_s: Annotated[float, typer.Option("--wait-s", help="Long-poll wait per claim.")] = 25.0,
) -> None:
    """Run the reference agent runtime: claim turns and run them (seed 004's loop)."""
    from pathlib import Path

    from maxclaw.client.commands import UsageError, run_agent
    from maxclaw.client.http import ApiError
    from maxclaw.logs import configure_logging

    settings = Settings()
    configure_logging(settings.log_level, settings.log_json, settings.log_library_level)
    try:
        run_agent(base_url, token, model, Path(workspace), runtime_id, once, wait_s)
    except (UsageError, ApiError) as exc:
        fail(str(exc))


@app.command()
def demo(
    step_delay_s: Annotated[float, typer.Option(help="Time each scripted model request takes.")]
        = 0.5,
    answer_after_s: Annotated[float, typer.Option(help="Max's delay before answering.")] = 1.0,
) -> None:
    """Seed 004's level 4 end to end (embedded database, server, scripted agents, Max)."""
    from maxclaw.devserver import run_demo
    from maxclaw.logs import configure_logging

    configure_logging("WARNING", False)
    run_demo(step_delay_s, answer_after_s, typer.echo)



ServerUrl = Annotated[str, typer.Option("--url", envvar="MAXCLAW_URL",
                                        help="The MaxClaw server (MAXCLAW_URL).")]
AgentToken = Annotated[str, typer.Option("--token", envvar="MAXCLAW_TOKEN",
                                         help="An agent token (MAXCLAW_TOKEN).")]


@app.command()
def mcp(
    url: ServerUrl = "http://127.0.0.1:8765",
    token: AgentToken = "",
    thread: Annotated[str | None, typer.Option("--thread", help="The thread to serve.")] = None,
    new_thread: Annotated[str | None, typer.Option(
        "--new-thread", help="Create a thread with this title and serve it.")] = None,
) -> None:
    """An MCP server over stdio (ask_user_question, get_answers, list_questions)."""
    from maxclaw.client.mcp_stdio import StartError, serve_stdio
    from maxclaw.logs import configure_logging

    settings = Settings()
    configure_logging(settings.log_level, settings.log_json)  # stderr: stdout is MCP's
    if not token:
        fail("maxclaw mcp needs an agent token: --token or MAXCLAW_TOKEN")
    try:
        asyncio.run(serve_stdio(url, token, thread, new_thread,
                                lambda line: typer.echo(line, err=True)))
    except StartError as exc:
        fail(f"mcp: {exc}")


@app.command()
def inbox(
    thread: Annotated[str, typer.Option("--thread", help="The thread whose inbox to take.")],
    url: ServerUrl = "http://127.0.0.1:8765",
    token: AgentToken = "",
    output: Annotated[str, typer.Option(
        "--format", help="json (always prints {messages}) or hook (prints nothing when empty).")]
        = "json",
    event: Annotated[str, typer.Option(
        "--event", help="hookEventName in hook format.")] = "PostToolUse",
) -> None:
    """Deliver what arrived in a thread since the last delivery (a step boundary)."""
    from maxclaw.client.mcp_hook import hook_output
    from maxclaw.client.mcp_stdio import StartError, take_inbox

    if output not in ("json", "hook"):
        fail("--format is json or hook")
    if not token:
        fail("maxclaw inbox needs an agent token: --token or MAXCLAW_TOKEN")
    try:
        messages = asyncio.run(take_inbox(url, token, thread))
    except StartError as exc:
        fail(f"inbox: {exc}")
    if output == "json":
        typer.echo(json.dumps({"messages": messages}, ensure_ascii=False))
        return
    line = hook_output(messages, event)
    if line is not None:
        typer.echo(line)



@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def bridge(
    ctx: typer.Context,
    url: ServerUrl = "http://127.0.0.1:8765",
    token: AgentToken = "",
    thread: Annotated[str | None, typer.Option("--thread", help="The thread to serve.")] = None,
    session: Annotated[str, typer.Option("--session", help="Fills {session}.")] = "",
    config: Annotated[str | None, typer.Option(
        "--config", help="A TOML file of thread tables (id, command, session, timeout_s).")] = None,
    timeout_s: Annotated[float, typer.Option(
        "--timeout-s", help="Kill a host command that runs longer.")] = 3600.0,
    state_dir: Annotated[str | None, typer.Option(
        "--state-dir", help="The journal (default $XDG_STATE_HOME/maxclaw/bridge).")] = None,
    wait_s: Annotated[float, typer.Option("--wait-s", help="Long-poll wait per claim.")] = 25.0,
) -> None:
    """Run an agent host when Max answers: maxclaw bridge --thread ID -- COMMAND {prompt}…"""
    from pathlib import Path

    from maxclaw.client.bridge import (
        BridgeStop,
        Target,
        default_state_dir,
        load_config,
        run_bridge,
    )
    from maxclaw.logs import configure_logging

    settings = Settings()
    configure_logging(settings.log_level, settings.log_json)
    if not token:
        fail("maxclaw bridge needs an agent token: --token or MAXCLAW_TOKEN")
    command = ctx.args[1:] if ctx.args[:1] == ["--"] else list(ctx.args)
    try:
        if config is not None:
            targets = load_config(Path(config))
        elif thread is not None and command:
            targets = [Target(thread, tuple(command), session, timeout_s)]
        else:
            raise BridgeStop("give --thread ID -- COMMAND … (or --config FILE)")
        run_bridge(url, token, targets, Path(state_dir) if state_dir else default_state_dir(),
                   wait_s)
    except BridgeStop as exc:
        fail(f"bridge: {exc}")


def _register_secrets() -> None:
    from maxclaw.secrets.cli import secrets_app

    app.add_typer(secrets_app, name="secrets")


_register_secrets()


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
