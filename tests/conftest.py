"""Shared fixtures. Every database test gets its own real PostgreSQL database."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from maxclaw.app import create_app
from maxclaw.auth.service import AuthService
from maxclaw.db.database import Database
from maxclaw.db.urls import plain_url, with_database
from maxclaw.settings import Settings
from tests import pg, pooler
from tests.local_http import LOCAL_TLS

# Every app and server a test starts seals secret answers under this key unless the test says
# otherwise (tests/integration/test_secrets_at_rest.py covers the key file and wrong keys).
TEST_SECRET_KEY = "bWF4Y2xhdy10ZXN0LWtleS0wMDAwMDAwMDAwMDAwMDA"
os.environ.setdefault("MAXCLAW_SECRET_KEY", TEST_SECRET_KEY)


# The modules that take longest in all (processes killed and restarted, leases and timeouts
# that must lapse, CLI runs, browsers, two replicas), longest first, from a `make test` run's
# junit report: collected first, so that xdist (`--dist loadscope --no-loadscope-reorder`, one
# module at a time to a worker, in this order) starts them at once and the run ends on short
# modules, not with one worker finishing a 80 s module while the others are idle. Only the
# order changes; every test runs as before.
LONG_FIRST = (
    "tests/integration/test_bridge.py",
    "tests/e2e/test_webui_push.py",
    "tests/e2e/test_webui.py",
    "tests/integration/test_mcp.py",
    "tests/integration/test_cli_tokens.py",
    "tests/integration/test_cli.py",
    "tests/e2e/test_serve.py",
    "tests/trust/test_tenant_stalls.py",
    "tests/e2e/test_webui_screen.py",
    "tests/integration/test_migrations.py",
    "tests/e2e/test_agent_kill.py",
    "tests/integration/test_realtime_ordering.py",
    "tests/integration/test_secrets_at_rest.py",
    "tests/e2e/test_webui_locales.py",
    "tests/e2e/test_webui_lifecycle.py",
    "tests/trust/test_serve_limits.py",
    "tests/e2e/test_realtime_server.py",
    "tests/integration/test_retract.py",
    "tests/integration/test_hooks.py",
    "tests/integration/test_query_plans.py",
    "tests/integration/test_realtime_protocol.py",
    "tests/e2e/test_webui_older_pages.py",
    "tests/integration/test_cards.py",
    "tests/e2e/test_webui_take_back.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {path: i for i, path in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(LONG_FIRST)))


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The PostgreSQL server under test: MAXCLAW_TEST_DATABASE_URL, else the embedded one."""
    given = pg.server_url_from_env()
    if given:
        yield given
        return
    # One server per pytest run, shared by its xdist workers (same run uid). Not under pytest's
    # basetemp: that is mode 0700, and as root pgserver runs postgres as another user.
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid{os.getpid()}"
    runs = pg.embedded_root() / "maxclaw-test-pg"
    pg.sweep_abandoned_runs(runs)
    base = runs / run
    base.mkdir(parents=True, exist_ok=True)
    for path in (base.parent, base):
        path.chmod(0o755)
    url, server = pg.start_embedded(base)
    yield url
    server.stop()  # type: ignore[attr-defined]
    # The last worker's stop shuts the server down (its postmaster.pid goes); that worker
    # deletes the run's data directory, or every run would leave gigabytes in /tmp (a full
    # disk once failed CI's install step). Other workers leave it to the last one. Until
    # 2026-12-06 no test database of the embedded server was ever dropped (pg.drop_database
    # read the name wrongly from its socket URL), and removing the 25,000 files left took 49 s
    # at the end of `make test`; a detached `rm` still does it while the next command runs.
    if not (base / "embedded-pg" / "pgdata" / "postmaster.pid").exists():
        _remove_in_background(base)


def _remove_in_background(path: Path) -> None:
    """Delete ``path`` in a process of its own that outlives this one; inline if ``rm`` is
    missing."""
    doomed = path.with_name(path.name + ".deleting")
    try:
        path.rename(doomed)  # the run's name is free at once, whatever rm takes
        # sh starts rm in the background and exits at once (so nothing is left to wait for);
        # rm, in a session of its own, outlives the test run
        subprocess.run(["sh", "-c", 'rm -rf -- "$1" >/dev/null 2>&1 &', "sh", str(doomed)],
                       check=True, start_new_session=True)
    except (OSError, subprocess.CalledProcessError):
        shutil.rmtree(doomed if doomed.exists() else path, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_template(pg_server: str) -> str:
    return asyncio.run(pg.ensure_template(pg_server))


@pytest.fixture(scope="session")
def pgbouncer(pg_server: str) -> Iterator[pooler.PgBouncer | None]:
    """PgBouncer (transaction mode) in front of the server when MAXCLAW_TEST_PGBOUNCER=1."""
    if not pooler.enabled():
        yield None
        return
    run = os.environ.get("PYTEST_XDIST_WORKER") or "main"
    base = Path(tempfile.mkdtemp(prefix=f"maxclaw-pgbouncer-{run}-"))
    bouncer = pooler.PgBouncer(pg_server, base)
    bouncer.start()
    yield bouncer
    bouncer.stop()


@pytest.fixture
def database_url(pg_server: str, pg_template: str,
                 pgbouncer: pooler.PgBouncer | None) -> Iterator[str]:
    """A fresh, migrated database for this test only (through PgBouncer when enabled)."""
    yield from cloned_database(pg_server, pg_template, pgbouncer)


def cloned_database(pg_server: str, template: str,
                    pgbouncer: pooler.PgBouncer | None) -> Iterator[str]:
    """The body of a fixture: a fresh clone of ``template`` for this test only (through
    PgBouncer when enabled), dropped after it."""
    url = asyncio.run(pg.clone_database(pg_server, template))
    yield pgbouncer.route(url) if pgbouncer is not None else url
    asyncio.run(pg.drop_database(pg_server, url))


@pytest.fixture
def empty_database(pg_server: str) -> Iterator[str]:
    """A brand-new database with no schema at all (not a clone of the migrated template)."""
    name = f"e_{uuid.uuid4().hex[:16]}"
    admin = plain_url(pg_server)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield with_database(pg_server, name)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# Every test server: `log` push devices on (many tests register them; production leaves them
# off), and refused tokens per address out of the way of the authorisation matrices, which
# send hundreds of bad tokens from 127.0.0.1. tests/trust/test_quotas.py sets them back.
# Tests that are not about quotas must not meet one: a load test opens 100 sockets for one
# user, a race runs 6 claims on one token, a fault test pushes hundreds of times a minute, the
# authorisation matrix sends hundreds of bad tokens from 127.0.0.1. The quotas' own tests
# (tests/trust/test_quotas.py) set each limit low explicitly, and test_the_defaults checks the
# shipped defaults on a plain Settings().
TEST_QUOTAS: dict[str, Any] = {"push_allow_log_devices": True,
                               "quota_failed_auth_per_minute": 100_000,
                               "quota_sockets_per_user": 10_000,
                               "quota_claims_per_token": 1_000,
                               "quota_devices_per_user": 10_000,
                               "quota_pushes_per_user_per_minute": 1_000_000}


def app_settings(database_url: str, **overrides: Any) -> Settings:
    """Settings for an in-process app: background jobs off unless a test turns them on."""
    base: dict[str, Any] = {
        "database_url": database_url, "run_sweeper": False, "run_push_dispatcher": False,
        "run_listener": False, "run_pruner": False, "log_json": True, "db_pool_min": 1,
        "db_pool_max": 10, **TEST_QUOTAS,
        **pooler.settings_for(database_url),
    }
    base.update(overrides)
    return Settings(**base)


@dataclass
class Actor:
    """A user with a user token and an agent token, plus an HTTP client for each.

    The agent token is the household's one runtime, Main's included, so it is made for Main
    (``for_main``): an unbound agent token writes in the Main thread only when it is
    (issue 14). ``tests/trust/test_main_fence.py`` mints the plain kind and proves the fence."""

    name: str
    user_id: str
    main_thread_id: str
    user_token: str
    agent_token: str
    user: httpx.AsyncClient
    agent: httpx.AsyncClient


@dataclass(repr=False)
class Harness:
    app: Any
    services: Any
    client: httpx.AsyncClient

    def __repr__(self) -> str:
        # short: Hypothesis prints a failing example's arguments, and the services' repr (with
        # their caches) ran to megabytes, so its "overly large repr" warning hid the failure
        return f"Harness(database={self.services.settings.database_url!r})"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        # Hypothesis's printer walks a dataclass's fields and ignores __repr__; this is the hook
        # it asks first. Without it a failing example's report ran to 1.7 MB, and its
        # "overly large repr" warning (an error under -W error) replaced the real failure.
        printer.text(repr(self))

    async def actor(self, name: str) -> Actor:
        user_id, main = await self.services.auth.create_user(name)
        user_token = await self.services.auth.create_token(name, "user")
        agent_token = await self.services.auth.create_token(name, "agent", for_main=True)
        return Actor(name, user_id, main, user_token, agent_token,
                     self.with_token(user_token), self.with_token(agent_token))

    def with_token(self, token: str | None) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app),
                                 base_url="http://test", headers=headers)


@asynccontextmanager
async def harness_for(database_url: str, **overrides: Any) -> AsyncIterator[Harness]:
    """The app in-process (lifespan run) with ``app_settings(database_url, **overrides)``."""
    app = create_app(app_settings(database_url, **overrides))
    async with app.router.lifespan_context(app):
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")
        yield Harness(app=app, services=app.state.services, client=client)
        await client.aclose()


@pytest.fixture
async def harness(database_url: str) -> AsyncIterator[Harness]:
    """The app in-process (lifespan run), with services reachable for setup."""
    async with harness_for(database_url) as h:
        yield h


async def user_with_tokens(database_url: str, name: str = "max") -> tuple[str, str]:
    """A new user and a user token and an agent token for it, as the CLI makes them."""
    db = Database(database_url, min_size=1, max_size=2)
    await db.open()
    try:
        auth = AuthService(db)
        await auth.create_user(name)
        return await auth.create_token(name, "user"), await auth.create_token(name, "agent")
    finally:
        await db.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ServerProcess:
    proc: subprocess.Popen[bytes]
    base_url: str
    database_url: str
    log_path: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_server(database_url: str, log_path: Path, port: int | None = None,
                 env: dict[str, str] | None = None, ready_within_s: float = 30.0,
                 ) -> ServerProcess:
    """The real ``maxclaw serve`` as a subprocess on a free port; waits for /readyz."""
    port = port or free_port()
    # MCP_PRELOAD off: most tests never call /mcp, and the SDK's import at start cost every
    # serve ~0.35 s of CPU (a tenth of `make test`'s serve CPU); a lazy /mcp imports it at its
    # first request. test_mcp's replicas run one of each (docs/benchmarks.md, item 4).
    full_env = {**os.environ, "MAXCLAW_DATABASE_URL": database_url, "MAXCLAW_LOG_JSON": "true",
                "MAXCLAW_MCP_PRELOAD": "false",
                **{f"MAXCLAW_{k.upper()}": str(v).lower() for k, v in TEST_QUOTAS.items()},
                **pooler.env_for(database_url), **(env or {})}
    log_file = log_path.open("ab")
    proc = subprocess.Popen([sys.executable, "-m", "maxclaw.cli", "serve", "--port", str(port)],
                            env=full_env, stdout=log_file, stderr=subprocess.STDOUT)
    log_file.close()  # the child holds its own copy; ours would leak (ResourceWarning = error)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + ready_within_s
    # one client for every poll: each new httpx client builds an SSL context (~22 ms of CPU,
    # certifi's bundle), and ten a second, while the serve started, were a fifth of the
    # workers' CPU in `make test` (py-spy, docs/benchmarks.md, item 4)
    with httpx.Client(timeout=1, verify=LOCAL_TLS) as http:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"serve exited early:\n{log_path.read_text()[-3000:]}")
            try:
                if http.get(base + "/readyz").status_code == 200:
                    return ServerProcess(proc, base, database_url, log_path)
            except httpx.HTTPError:
                pass
            # another process has no event to await: poll /readyz, bounded by the deadline
            time.sleep(0.1)
    proc.kill()
    proc.wait()  # reaped here, or its Popen warns (ResourceWarning) in some later test
    raise RuntimeError(f"serve did not become ready:\n{log_path.read_text()[-3000:]}")


@pytest.fixture
def server(database_url: str, tmp_path: Path) -> Iterator[ServerProcess]:
    """A real ``maxclaw serve`` on its own database."""
    srv = start_server(database_url, tmp_path / "serve.log")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def shared_server(pg_server: str, pg_template: str, pgbouncer: pooler.PgBouncer | None,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One ``maxclaw serve`` (and database) for a module whose tests only read what every
    server serves (static files, docs, probes) and write nothing another test reads: a start
    costs seconds of CPU on a 2-core machine, a module's tests share it."""
    url = asyncio.run(pg.clone_database(pg_server, pg_template))
    routed = pgbouncer.route(url) if pgbouncer is not None else url
    srv = start_server(routed, tmp_path_factory.mktemp("shared-serve") / "serve.log")
    yield srv
    srv.stop()
    asyncio.run(pg.drop_database(pg_server, url))
