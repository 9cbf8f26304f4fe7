"""Apply alembic migrations programmatically (``maxclaw migrate``, ``serve`` at start, tests)."""

from __future__ import annotations

import ast
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import asyncpg

from maxclaw.db.database import fetch_once
from maxclaw.db.urls import plain_url

if TYPE_CHECKING:
    from alembic.config import Config

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
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(alembic_dir()))
    cfg.attributes["database_url"] = database_url
    return cfg


@contextmanager
def migration_lock(database_url: str) -> Iterator[None]:
    """One migrator per database at a time. Replicas that start together on a fresh database
    each run ``upgrade``; unserialised, all but one failed on duplicate catalog entries. The
    ones that wait find the schema at head and do nothing."""
    import psycopg  # only to migrate: at head (every other start) nothing here runs

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
    """``alembic upgrade <revision>`` against ``database_url``; to "head" on a database already
    there, one query and no alembic at all (``at_head``)."""
    if revision == "head" and at_head(database_url):
        return
    from alembic import command

    with migration_lock(database_url):
        command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str = "base") -> None:
    """``alembic downgrade <revision>`` against ``database_url``."""
    from alembic import command

    with migration_lock(database_url):
        command.downgrade(alembic_config(database_url), revision)


def at_head(database_url: str) -> bool:
    """Whether the database's one ``alembic_version`` row is the scripts' head. Every CLI
    command and every ``serve`` start upgrades first; importing alembic and SQLAlchemy and
    loading every script to find nothing to do was most of a command's time (0.45 of 0.9 s
    CPU, docs/benchmarks.md, issue 33 item 4, fifth pass). Any doubt (no table yet, a
    revision ahead of these scripts, branches) answers False, and alembic decides; so does a
    database that cannot be reached, and alembic's own attempt says why."""
    head = script_head()
    if head is None:
        return False
    try:
        rows = fetch_once(database_url, "SELECT version_num FROM alembic_version")
    # no table yet (a new database), not allowed to read it, or not reachable
    except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError):
        return False
    return [tuple(row) for row in rows] == [(head,)]


def script_head() -> str | None:
    """The head revision of the migration scripts, read from their ``revision`` and
    ``down_revision`` assignments without importing them; None unless it is one linear
    history (tests/integration/test_migrate_head.py holds it equal to alembic's own answer)."""
    revisions: dict[str, str | None] = {}
    for path in alembic_dir().joinpath("versions").glob("*.py"):
        assigned = _assignments(path)
        revision, down = assigned.get("revision"), assigned.get("down_revision")
        if not isinstance(revision, str) or not (down is None or isinstance(down, str)):
            return None  # not a plain script, or a merge of branches
        revisions[revision] = down
    heads = set(revisions) - {down for down in revisions.values() if down is not None}
    return heads.pop() if len(heads) == 1 else None


def earlier_migration(revision: str) -> ModuleType:
    """An earlier migration's module, while alembic runs the migrations: a later migration's
    downgrade puts back the SQL that one froze (its constants) instead of keeping a second
    copy of it. Only the frozen scripts are read this way, never the moving schema."""
    from alembic import context

    script = context.script.get_revision(revision)
    if script is None:
        raise LookupError(f"no migration {revision!r} among the scripts")
    return script.module


def _assignments(path: Path) -> dict[str, object]:
    """The module-level ``name = <literal>`` assignments of a script, parsed, not run."""
    found: dict[str, object] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(
                node.targets[0], ast.Name):
            try:
                found[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    return found
