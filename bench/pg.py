"""The PostgreSQL the suite measures: the anchors' server when it answers, else an embedded one.

Whatever server is used, the suite works in a fresh database it creates, migrates and drops,
so a run never touches anyone's data.
"""

from __future__ import annotations

import asyncio
import os
import platform
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg

from maxclaw.db import migrate
from maxclaw.db.urls import plain_url, redact, with_database

# The anchors in the Performance issue were measured on this server (PostgreSQL 15, fsync on).
ANCHOR_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"


@dataclass
class Server:
    """A server URL (its maintenance database), how it was chosen, and how to let it go."""

    url: str
    source: str  # "given" | "anchor-server" | "embedded"
    _embedded: Any = None

    def stop(self) -> None:
        if self._embedded is not None:
            self._embedded.stop()
            self._embedded = None


async def _answers(url: str) -> bool:
    try:
        conn = await asyncio.wait_for(asyncpg.connect(plain_url(url)), 3)
    except (OSError, asyncpg.PostgresError, TimeoutError):
        return False
    await conn.close()
    return True


def choose_server(given: str | None) -> Server:
    """``--database-url`` if given; else 127.0.0.1:5432 if it answers; else embedded."""
    if given:
        return Server(given, "given")
    if asyncio.run(_answers(ANCHOR_SERVER)):
        return Server(ANCHOR_SERVER, "anchor-server")
    from maxclaw.db.embedded import EmbeddedPostgres

    embedded = EmbeddedPostgres(Path(tempfile.mkdtemp(prefix="maxclaw-bench-")))
    return Server(embedded.start(), "embedded", embedded)


@dataclass
class BenchDatabase:
    """A fresh, migrated database on ``server`` for this run only."""

    server: Server
    name: str = field(default_factory=lambda: f"maxclaw_bench_{uuid.uuid4().hex[:10]}")
    migrated: bool = True  # False: an empty database (LangGraph's saver creates its own tables)

    @property
    def url(self) -> str:
        return with_database(self.server.url, self.name)

    async def _admin(self, sql: str) -> None:
        conn = await asyncpg.connect(plain_url(self.server.url))
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    def create(self) -> str:
        asyncio.run(self._admin(f'CREATE DATABASE "{self.name}"'))
        if self.migrated:
            migrate.upgrade(self.url)
        return self.url

    def drop(self) -> None:
        asyncio.run(self._admin(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)'))


@contextmanager
def fresh_database(given: str | None) -> Iterator[str]:
    """A migrated database of its own on ``given`` (else the server ``choose_server`` picks),
    dropped afterwards; the load average is printed before and after, since a same-run
    comparison is only as good as the machine was quiet."""
    server = choose_server(given)
    db = BenchDatabase(server)
    url = db.create()
    print(f"load average {os.getloadavg()}", flush=True)
    try:
        yield url
    finally:
        db.drop()
        server.stop()
        print(f"load average {os.getloadavg()}", flush=True)


async def execute_sql(url: str, sql: str) -> None:
    """Run ``sql`` (one or more statements) on its own connection: a definition swapped in
    or back between the slices of a same-run comparison."""
    conn = await asyncpg.connect(plain_url(url))
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def postgres_settings(url: str) -> dict[str, Any]:
    conn = await asyncpg.connect(plain_url(url))
    try:
        return {name: await conn.fetchval(f"SHOW {name}") for name in (
            "server_version", "fsync", "synchronous_commit", "shared_buffers", "wal_level",
            "max_connections", "jit")}
    finally:
        await conn.close()


def machine(settings: dict[str, Any], url: str) -> dict[str, Any]:
    """What a figure depends on: cores, CPU, PostgreSQL version and durability settings."""
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip()
    import maxclaw

    return {"nproc": os.cpu_count(), "cpu": cpu, "python": platform.python_version(),
            "maxclaw_code": str(Path(maxclaw.__file__).resolve().parent.parent),
            "os": platform.platform(), "loadavg_at_start": list(os.getloadavg()),
            "postgres": settings, "git_commit": commit, "database": redact(url)}
