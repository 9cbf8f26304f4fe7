"""``migrate.upgrade`` to head skips alembic on a database already there (``at_head``): the
shortcut must agree with alembic on what the head is and must never skip real work."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from alembic.script import ScriptDirectory

from maxclaw.db import migrate, roles
from maxclaw.db.urls import plain_url


def test_the_head_read_from_the_scripts_is_alembics() -> None:
    alembic_head = ScriptDirectory.from_config(migrate.alembic_config("unused")).get_current_head()
    assert migrate.script_head() == alembic_head


def test_a_merge_or_an_unreadable_script_leaves_the_answer_to_alembic(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    versions = tmp_path / "versions"
    versions.mkdir()
    (versions / "a.py").write_text('revision = "a"\ndown_revision = None\n')
    (versions / "b.py").write_text('revision = "b"\ndown_revision = "a"\n')
    monkeypatch.setattr(migrate, "alembic_dir", lambda: tmp_path)
    assert migrate.script_head() == "b"
    (versions / "c.py").write_text('revision = "c"\ndown_revision = "a"\n')  # two heads
    assert migrate.script_head() is None
    (versions / "d.py").write_text('revision = "d"\ndown_revision = ("b", "c")\n')  # a merge
    assert migrate.script_head() is None
    (versions / "d.py").write_text('revision = NAME\ndown_revision = "b"\n')
    assert migrate.script_head() is None


def test_at_head_only_when_the_one_version_row_is_the_head(database_url: str,
                                                           empty_database: str) -> None:
    assert migrate.at_head(database_url)  # the template is migrated to head
    assert not migrate.at_head(empty_database)  # no alembic_version table at all
    with psycopg.connect(plain_url(database_url), autocommit=True) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '0024_search_stored'")
        assert not migrate.at_head(database_url)
        conn.execute("UPDATE alembic_version SET version_num = 'from_newer_code'")
        assert not migrate.at_head(database_url)


def test_upgrade_behind_head_still_migrates(empty_database: str) -> None:
    migrate.upgrade(empty_database, "0024_search_stored")
    assert not migrate.at_head(empty_database)
    migrate.upgrade(empty_database)
    assert migrate.at_head(empty_database)
    with psycopg.connect(plain_url(empty_database)) as conn:
        version = conn.execute("SELECT version_num FROM alembic_version").fetchall()
    assert version == [(migrate.script_head(),)]


START_CHECKS = """
import json, sys
from maxclaw.db import migrate, roles
migrate.upgrade(sys.argv[1])  # at head: one query
why = roles.privileged_role(sys.argv[1])
print(json.dumps({"why": why, "loaded": sorted({m.split('.')[0] for m in sys.modules})}))
"""


def test_the_start_up_checks_at_head_need_no_migration_driver(database_url: str) -> None:
    # serve and every CLI command run these first; psycopg (with SQLAlchemy and alembic) is
    # only for migrating: its import was 0.11-0.16 s of CPU per process (docs/benchmarks.md)
    out = subprocess.run([sys.executable, "-c", START_CHECKS, database_url], check=True,
                         capture_output=True, text=True, timeout=60).stdout
    result = json.loads(out)
    assert "maxclaw" in result["loaded"] and "asyncpg" in result["loaded"]
    assert not set(result["loaded"]) & {"psycopg", "sqlalchemy", "alembic"}
    # the test server's role owns the schema: the check ran and says so
    assert result["why"] is not None
    assert "superuser" in result["why"] or "owner of" in result["why"]


async def test_the_checks_also_answer_from_inside_a_running_event_loop(database_url: str) -> None:
    # a caller inside async code (tests, tools) gets the same answers: the query runs on a
    # loop of its own in a worker thread
    assert migrate.at_head(database_url)
    assert roles.privileged_role(database_url) is not None
