"""Apply alembic migrations programmatically (``maxclaw migrate``, ``serve`` at start, tests)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from alembic import command
from alembic.config import Config

from maxclaw.db.urls import plain_url

# pg_advisory_lock key held while migrating (advisory locks are scoped to one database)
MIGRATION_LOCK = 7356002
LOCK_POLL_S = 0.2


def alembic_dir() -> Path:
    """The migration scripts: ``alembic/`` in a checkout, ``maxclaw/_alembic`` in a wheel."""
    packaged = Path(__file__).resolve().parent.parent / "_alembic"
    if packaged.is_dir():
        return packaged
    checkout = Path(__file__).resolve().parents[3] / "alembic"
    if checkout.is_dir():
        return checkout
    raise FileNotFoundError("alembic migration scripts not found next to the maxclaw package")


def alembic_config(database_url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(alembic_dir()))
    cfg.attributes["database_url"] = database_url
    return cfg


@contextmanager
def migration_lock(database_url: str) -> Iterator[None]:
    """One migrator per database at a time. Replicas that start together on a fresh database
    each run ``upgrade``; unserialised, all but one failed on duplicate catalog entries. The
    ones that wait find the schema at head and do nothing."""
    with psycopg.connect(plain_url(database_url), autocommit=True) as conn:
        # polled, not waited on: a waiting pg_advisory_lock is a statement with a snapshot,
        # and CREATE INDEX CONCURRENTLY in the holder's migration waits for every such
        # snapshot in the database (a deadlock no detector sees)
        while not conn.execute("SELECT pg_try_advisory_lock(%s)",
                               (MIGRATION_LOCK,)).fetchone()[0]:  # type: ignore[index]
            time.sleep(LOCK_POLL_S)
        try:
            yield
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))


def upgrade(database_url: str, revision: str = "head") -> None:
    """``alembic upgrade <revision>`` against ``database_url``."""
    with migration_lock(database_url):
        command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str = "base") -> None:
    """``alembic downgrade <revision>`` against ``database_url``."""
    with migration_lock(database_url):
        command.downgrade(alembic_config(database_url), revision)
