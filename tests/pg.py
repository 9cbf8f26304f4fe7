"""Real PostgreSQL for tests: a server (given, or embedded once per run), a migrated template
database, and a fresh clone of it per test (``CREATE DATABASE … TEMPLATE``)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import uuid
from pathlib import Path

import asyncpg

from maxclaw.db import migrate
from maxclaw.db.migrate import alembic_dir
from maxclaw.db.urls import plain_url, with_database
from maxclaw.ops import partition

TEST_URL_ENV = "MAXCLAW_TEST_DATABASE_URL"
# MAXCLAW_TEST_PARTITIONS=8: the template is hash-partitioned by user_id into 8 partitions after
# the migrations (maxclaw.ops.partition, the local stand-in for a distributed database)
PARTITIONS_ENV = "MAXCLAW_TEST_PARTITIONS"


def partitions_from_env() -> int:
    """How many partitions per user-owned table the test databases get (0: not partitioned)."""
    value = os.environ.get(PARTITIONS_ENV, "").strip()
    return int(value) if value else 0


def migrations_fingerprint() -> str:
    """Changes whenever a migration file changes, so a stale template is never reused."""
    digest = hashlib.sha256()
    for path in [*sorted(alembic_dir().rglob("*.py")), Path(partition.__file__)]:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def start_embedded(base: Path) -> tuple[str, object]:
    from maxclaw.db.embedded import EmbeddedPostgres

    server = EmbeddedPostgres(base / "embedded-pg")
    return server.start(), server


async def _admin(server_url: str) -> asyncpg.Connection:
    return await asyncpg.connect(plain_url(server_url))


async def ensure_template(server_url: str, partitions: int | None = None) -> str:
    """Create the migrated template once per server (an advisory lock serialises workers),
    partitioned when ``partitions`` (default: MAXCLAW_TEST_PARTITIONS) says so."""
    partitions = partitions_from_env() if partitions is None else partitions
    name = f"maxclaw_tmpl_{migrations_fingerprint()}" + (f"_p{partitions}" if partitions else "")
    conn = await _admin(server_url)
    try:
        await conn.execute("SELECT pg_advisory_lock(7356001)")
        exists = await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name)
        if not exists:
            building = name + "_building"
            await conn.execute(f'DROP DATABASE IF EXISTS "{building}" WITH (FORCE)')
            await conn.execute(f'CREATE DATABASE "{building}"')
            await asyncio.to_thread(migrate.upgrade, with_database(server_url, building))
            if partitions:
                await asyncio.to_thread(partition.partition_database,
                                        with_database(server_url, building), partitions)
            await conn.execute(f'ALTER DATABASE "{building}" RENAME TO "{name}"')
        await conn.execute("SELECT pg_advisory_unlock(7356001)")
    finally:
        await conn.close()
    return name


async def clone_database(server_url: str, template: str) -> str:
    """A fresh database copied from the template; returns its URL."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    conn = await _admin(server_url)
    try:
        for attempt in range(20):
            try:
                await conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
                break
            except asyncpg.ObjectInUseError:  # another worker is cloning at this instant
                await asyncio.sleep(0.05 * (attempt + 1))
        else:
            raise RuntimeError(f"could not clone {template}: it stays in use")
    finally:
        await conn.close()
    return with_database(server_url, name)


async def drop_database(server_url: str, url: str) -> None:
    name = url.rsplit("/", 1)[1].split("?", 1)[0]
    conn = await _admin(server_url)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


def server_url_from_env() -> str | None:
    return os.environ.get(TEST_URL_ENV) or None
