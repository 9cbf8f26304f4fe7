"""Real PostgreSQL for tests: a server (given, or embedded once per run), a migrated template
database, and a fresh clone of it per test (``CREATE DATABASE … TEMPLATE``)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

import asyncpg

from maxclaw.db import migrate
from maxclaw.db.migrate import alembic_dir
from maxclaw.db.urls import database_of, plain_url, with_database
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


# The embedded server of a test run holds nothing worth a crash of the machine: it dies with
# the run. Every test database is dropped at teardown, and DROP DATABASE waits for an
# immediate checkpoint; with fsync on, each waited for every dirty page of every database the
# other workers were using to reach the disk (teardowns of 13-38 s in `make test`), and each
# checkpoint made the next write of every page a full-page image in the WAL. A postgres killed
# by a test loses nothing either way: its writes are in the OS's cache (synchronous_commit stays
# on, so a commit is in the WAL before it is acknowledged). Only this private server is set
# so: a server given by MAXCLAW_TEST_DATABASE_URL is never altered.
EMBEDDED_SETTINGS = {"fsync": "off", "full_page_writes": "off"}


# The run's embedded server keeps its data in memory when the machine has a tmpfs with room for
# it. Every test clones the migrated template (about 400 files: one per catalog and table, and
# their forks) and drops it after, some 1,100 times in `make test`; on ext4, creating those
# files cost the cloning backend 135-370 ms of kernel CPU per clone (perf: the inode allocator,
# `find_inode_bit` and `recently_deleted`, searching bitmaps full of just-deleted inodes), on
# tmpfs 18-21 ms (`docs/benchmarks.md`, issue 33 item 4, fifth pass). The server dies with the
# run, so memory loses nothing a disk would have kept. The data directory peaked at 336 MB in
# `make test` (the WAL is bounded by max_wal_size, 1 GB, and dropped databases leave nothing).
TMPFS_CANDIDATE = Path("/dev/shm")
TMPFS_MIN_FREE = 2 * 1024**3


def embedded_root() -> Path:
    """The directory under which a test run puts its embedded server: a tmpfs with at least
    TMPFS_MIN_FREE bytes free when there is one, else the system's temporary directory."""
    try:
        stats = os.statvfs(TMPFS_CANDIDATE)
    except OSError:  # no /dev/shm (macOS)
        return Path(tempfile.gettempdir())
    if stats.f_bavail * stats.f_frsize >= TMPFS_MIN_FREE and os.access(TMPFS_CANDIDATE, os.W_OK):
        return TMPFS_CANDIDATE
    return Path(tempfile.gettempdir())


def sweep_abandoned_runs(runs: Path, older_than_s: float = 3600.0) -> None:
    """Delete the data of earlier runs that were killed before their last worker could (a
    cancelled CI job, a ^C): in a tmpfs they would hold memory until the next reboot. A run is
    abandoned when its server is not running and nothing touched it for ``older_than_s``
    (a run that is just starting has no server yet, but a new directory)."""
    if not runs.is_dir():
        return
    for run in runs.iterdir():
        try:
            if time.time() - run.stat().st_mtime < older_than_s or _server_alive(run):
                continue
        except OSError:  # another run is deleting it at this instant
            continue
        shutil.rmtree(run, ignore_errors=True)


def _server_alive(run: Path) -> bool:
    pid_file = run / "embedded-pg" / "pgdata" / "postmaster.pid"
    try:
        pid = int(pid_file.read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, run by another user
        pass
    return True


def start_embedded(base: Path) -> tuple[str, object]:
    from maxclaw.db.embedded import EmbeddedPostgres

    server = EmbeddedPostgres(base / "embedded-pg")
    url = server.start()
    asyncio.run(_tune(url))
    return url, server


async def _tune(server_url: str) -> None:
    """EMBEDDED_SETTINGS, reloaded (both take effect without a restart)."""
    conn = await _admin(server_url)
    try:
        for name, value in EMBEDDED_SETTINGS.items():
            await conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
        await conn.execute("SELECT pg_reload_conf()")
    finally:
        await conn.close()


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


async def ensure_derived_template(server_url: str, base: str, tag: str,
                                  build: Callable[[str], Awaitable[object]],
                                  sources: Iterable[Path]) -> str:
    """A template made once per server from the template ``base`` by ``build(url)`` (a bulk
    load that several tests need the same of): tests clone it instead of each loading the
    rows again. Its name carries ``base`` (so the migrations) and a digest of ``sources`` (the
    files whose code builds it), so a stale one is never reused on a given server."""
    digest = hashlib.sha256()
    for path in sources:
        digest.update(path.read_bytes())
    name = f"{base}_{tag}_{digest.hexdigest()[:8]}"
    conn = await _admin(server_url)
    try:
        await conn.execute("SELECT pg_advisory_lock(hashtext($1))", name)
        try:
            exists = await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name)
            if not exists:
                building = name + "_b"
                await conn.execute(f'DROP DATABASE IF EXISTS "{building}" WITH (FORCE)')
                await _create_from(conn, building, base)
                await build(with_database(server_url, building))
                await conn.execute(f'ALTER DATABASE "{building}" RENAME TO "{name}"')
        finally:
            await conn.execute("SELECT pg_advisory_unlock(hashtext($1))", name)
    finally:
        await conn.close()
    return name


async def _create_from(conn: asyncpg.Connection, name: str, template: str) -> None:
    for attempt in range(20):
        try:
            await conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
            return
        except asyncpg.ObjectInUseError:  # another worker is cloning at this instant
            await asyncio.sleep(0.05 * (attempt + 1))
    raise RuntimeError(f"could not clone {template}: it stays in use")


async def clone_database(server_url: str, template: str) -> str:
    """A fresh database copied from the template; returns its URL."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    conn = await _admin(server_url)
    try:
        await _create_from(conn, name, template)
    finally:
        await conn.close()
    return with_database(server_url, name)


async def drop_database(server_url: str, url: str) -> None:
    # by the URL's path: the text after its last slash was the socket directory's last part for
    # the embedded server (``…/t_1?host=…/pgdata``), so until 2026-12-06 its test databases were
    # never dropped, and a run's data directory grew to 7 GB (docs/benchmarks.md, issue 33
    # item 4, fifth pass)
    name = database_of(url)
    conn = await _admin(server_url)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


def server_url_from_env() -> str | None:
    return os.environ.get(TEST_URL_ENV) or None
