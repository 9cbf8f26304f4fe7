"""The migration sequence: one line of files numbered in the order they apply, and a database
left at any revision a release could have left it at upgrades to head and then equals the
declared schema (``metadata`` and ``live.sql``), its rows kept.

Revision ids are what databases record, so they never change; the file numbers are only the
reading order (alembic/versions/README.md)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from alembic.script import ScriptDirectory

from maxclaw.db import migrate
from maxclaw.db.urls import plain_url
from tests.integration.test_schema import (
    CATALOG_QUERIES,
    DEFINITION_QUERIES,
    PROGRAMMABLE_QUERIES,
    autogenerate_diff,
    built_from_declarations,
    head_revision,
    snapshot,
)

VERSIONS = migrate.alembic_dir() / "versions"
_NUMBERED = re.compile(r"\A(\d{4})_\w+\.py\Z")


def script() -> ScriptDirectory:
    return ScriptDirectory.from_config(migrate.alembic_config("postgresql://unused/x"))


def chain() -> list[str]:
    """Every revision id, oldest first, following ``down_revision``."""
    return [r.revision for r in reversed(list(script().walk_revisions()))]


def file_of(revision: str) -> Path:
    path = script().get_revision(revision).path
    return Path(path)


def sequence_problems(files: list[tuple[str, str, str | None]]) -> list[str]:
    """What breaks one readable line in ``(file name, revision, down_revision)``, listed in
    file-name order: a name not ``NNNN_<what>.py``, a gap or repeat in the numbers, or a file
    that does not revise the one before it."""
    problems: list[str] = []
    previous: str | None = None
    for number, (name, revision, down) in enumerate(files, start=1):
        match = _NUMBERED.match(name)
        if match is None or int(match[1]) != number:
            problems.append(f"{name}: expected the number {number:04d}")
        if down != previous:
            problems.append(f"{name}: revises {down}, the file before it is {previous}")
        previous = revision
    return problems


def declared_files() -> list[tuple[str, str, str | None]]:
    found = []
    for path in sorted(VERSIONS.glob("*.py")):
        rev = script().get_revision(_revision_in(path))
        assert rev is not None
        down = rev.down_revision
        assert down is None or isinstance(down, str), f"{path.name}: a merge revision"
        found.append((path.name, rev.revision, down))
    return found


def _revision_in(path: Path) -> str:
    match = re.search(r'^revision = "([^"]+)"$', path.read_text(), re.M)
    assert match is not None, path
    return match[1]


def test_the_sequence_check_finds_a_broken_line() -> None:
    assert sequence_problems([("0001_a.py", "1", None), ("0002_b.py", "2", "1")]) == []
    assert sequence_problems([
        ("0001_a.py", "1", None), ("0002_c.py", "3", "2"), ("0002_b.py", "2", "1"),
        ("0004_d.py", "4", "3"), ("five.py", "5", "4")]) == [
        "0002_c.py: revises 2, the file before it is 1",
        "0002_b.py: expected the number 0003",
        "0002_b.py: revises 1, the file before it is 3",
        "0004_d.py: revises 3, the file before it is 2",
        "five.py: expected the number 0005",
    ]


def test_migration_files_are_one_numbered_line() -> None:
    files = declared_files()
    assert len(files) == len(chain()) >= 14  # guards the walk: every file is a revision
    assert sequence_problems(files) == []
    assert script().get_heads() == [files[-1][1]]
    # the docstring names the revision the file declares (readers grep for it)
    wrong = [name for name, revision, _ in files
             if f"Revision ID: {revision}\n" not in (VERSIONS / name).read_text()]
    assert wrong == []


@pytest.fixture
def declared_database(pg_server: str) -> Iterator[str]:
    with built_from_declarations(pg_server) as url:
        yield url


def _seed(url: str) -> str:
    """A user and a thread, written with columns the first revision already has."""
    with psycopg.connect(plain_url(url), autocommit=True) as conn:
        row = conn.execute("INSERT INTO users (name) VALUES ('max') RETURNING id").fetchone()
        assert row is not None
        conn.execute("INSERT INTO threads (user_id, kind, title) VALUES (%s, 'normal', 'kept')",
                     (row[0],))
    return str(row[0])


@pytest.mark.parametrize("released", chain()[:-1])
def test_a_database_left_at_an_old_revision_upgrades_to_the_declared_schema(
        released: str, empty_database: str, declared_database: str) -> None:
    """Every revision but head is a state some build left a database in (released heads among
    them, from the first one on); each one reaches head with its rows and ends exactly as the
    declared schema, as a new database would."""
    migrate.upgrade(empty_database, released)
    user_id = _seed(empty_database)

    migrate.upgrade(empty_database)

    with psycopg.connect(plain_url(empty_database), autocommit=True) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [
            (head_revision(),)]
        kept = conn.execute("SELECT t.title FROM threads t JOIN users u ON u.id = t.user_id "
                            "WHERE u.id = %s", (user_id,)).fetchall()
    assert kept == [("kept",)]
    assert autogenerate_diff(empty_database) == []
    everything = {**CATALOG_QUERIES, **PROGRAMMABLE_QUERIES, **DEFINITION_QUERIES}
    assert snapshot(empty_database, everything) == snapshot(declared_database, everything)


def test_old_revisions_are_found_by_their_released_ids() -> None:
    """The ids databases hold today still name the files they were released as."""
    assert chain()[0] == "0001"
    assert file_of("0005_trust").name == "0005_trust.py"
    assert file_of("0006_life_a").name == "0013_life_a.py"
    assert file_of("0006_life_b").name == "0012_life_b.py"
    assert file_of("0007_open_cards_key").name == "0014_open_cards_key.py"
