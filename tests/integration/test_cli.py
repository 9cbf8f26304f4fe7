"""The operator CLI as operators run it: the installed ``maxclaw`` script in a subprocess,
against this test's own database."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from alembic.script import ScriptDirectory

from maxclaw.db import migrate
from maxclaw.db.urls import plain_url
from tests.conftest import Harness, free_port

# the console script `pip install -e .` put next to this interpreter: a missing install fails here
MAXCLAW = str(Path(sys.executable).parent / "maxclaw")


@dataclass
class Run:
    code: int
    out: str
    err: str

    def assert_ok(self) -> None:
        assert self.code == 0, self.err
        assert "Traceback" not in self.err

    def assert_one_line_error(self) -> str:
        """A refusal is exactly one line on stderr, a non-zero exit, and no traceback."""
        assert self.code != 0
        assert "Traceback" not in self.err
        assert "Traceback" not in self.out
        lines = self.err.strip().splitlines()
        assert len(lines) == 1, self.err
        assert lines[0].startswith("maxclaw: ")
        return lines[0]


async def cli(*args: str, env: dict[str, str] | None = None, data_dir: Path) -> Run:
    """Run ``maxclaw ARGS`` with a clean MAXCLAW_* environment (plus ``env``)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("MAXCLAW_")}
    # never the operator's real data directory, even if a URL went missing by mistake
    base["MAXCLAW_DATA_DIR"] = str(data_dir)
    proc = await asyncio.create_subprocess_exec(
        MAXCLAW, *args, env={**base, **(env or {})},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode is not None
    return Run(proc.returncode, out.decode(), err.decode())


def closed_port_url() -> str:
    return f"postgresql://postgres@127.0.0.1:{free_port()}/nowhere"


async def test_user_and_tokens(database_url: str, harness: Harness, tmp_path: Path) -> None:
    db = ("--database-url", database_url)
    created = await cli("user", "create", "max", "--json", *db, data_dir=tmp_path)
    created.assert_ok()
    user = json.loads(created.out)
    assert set(user) == {"user_id", "main_thread_id"}

    async with harness.services.db.connection() as conn:
        main = await conn.fetchrow("SELECT user_id::text, kind FROM threads WHERE id = $1::uuid",
                                   user["main_thread_id"])
    assert dict(main) == {"user_id": user["user_id"], "kind": "main"}

    issued = await cli("token", "create", "--user", "max", "--role", "user", "--json", *db,
                       data_dir=tmp_path)
    issued.assert_ok()
    token = json.loads(issued.out)["token"]
    me = await harness.with_token(token).get("/v1/me")
    assert me.status_code == 200
    # the contract's three fields, exactly (``/v1/me`` adds counts and settings beside them)
    assert {k: me.json()[k] for k in ("user_id", "name", "main_thread_id")} == {
        "user_id": user["user_id"], "name": "max", "main_thread_id": user["main_thread_id"]}

    bound = await cli("token", "create", "--user", "max", "--role", "agent",
                      "--thread", user["main_thread_id"], "--json", *db, data_dir=tmp_path)
    bound.assert_ok()
    agent_token = json.loads(bound.out)["token"]
    # an agent token on a user endpoint is refused by role, so it did authenticate
    assert (await harness.with_token(agent_token).get("/v1/me")).status_code == 403

    plain = await cli("token", "create", "--user", "max", "--role", "user", *db,
                      data_dir=tmp_path)
    plain.assert_ok()
    plain_token = plain.out.strip()
    assert "\n" not in plain_token
    assert (await harness.with_token(plain_token).get("/v1/me")).status_code == 200

    async with harness.services.db.connection() as conn:
        rows = await conn.fetch("SELECT role, thread_id::text, t::text AS whole "
                                "FROM api_tokens t ORDER BY id")
    assert [(r["role"], r["thread_id"]) for r in rows] == [
        ("user", None), ("agent", user["main_thread_id"]), ("user", None)]
    # only hashes are stored: no token appears anywhere in its row
    for secret in (token, agent_token, plain_token):
        assert all(secret not in r["whole"] for r in rows)


@pytest.mark.parametrize(("args", "says"), [
    (("token", "create", "--user", "nobody", "--role", "user"), "No user named 'nobody'"),
    (("token", "create", "--user", "max", "--role", "admin"), "role"),
    (("token", "create", "--user", "max", "--role", "user", "--thread",
      "7b0e8a34-7c2f-4a51-9d8a-2a4c3f0c9b11"), "only agent tokens"),
    (("token", "create", "--user", "max", "--role", "agent", "--thread", "not-a-uuid"),
     "No such thread"),
    (("user", "create", "max"), "already exists"),
])
async def test_refusals_are_one_line(database_url: str, harness: Harness, tmp_path: Path,
                                     args: tuple[str, ...], says: str) -> None:
    await harness.services.auth.create_user("max")
    run = await cli(*args, "--database-url", database_url, data_dir=tmp_path)
    assert says in run.assert_one_line_error()
    assert run.out == ""
    async with harness.services.db.connection() as conn:
        assert await conn.fetchval("SELECT count(*) FROM api_tokens") == 0
        assert await conn.fetchval("SELECT count(*) FROM users") == 1


async def test_migrate_an_empty_database(empty_database: str, tmp_path: Path) -> None:
    # from MAXCLAW_DATABASE_URL, as in docker-compose's one-shot migrate service
    first = await cli("migrate", env={"MAXCLAW_DATABASE_URL": empty_database},
                      data_dir=tmp_path)
    first.assert_ok()
    assert first.out.strip() == "migrated to head"
    head = ScriptDirectory.from_config(migrate.alembic_config("unused")).get_current_head()
    with psycopg.connect(plain_url(empty_database), autocommit=True) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [(head,)]
        assert conn.execute("SELECT to_regclass('public.message_components')::text"
                            ).fetchone() == ("message_components",)
    # running it again changes nothing and succeeds
    (await cli("migrate", "--database-url", empty_database, data_dir=tmp_path)).assert_ok()


async def test_the_flag_wins_over_the_environment(database_url: str, tmp_path: Path) -> None:
    run = await cli("user", "create", "max", "--json", "--database-url", database_url,
                    env={"MAXCLAW_DATABASE_URL": closed_port_url()}, data_dir=tmp_path)
    run.assert_ok()
    assert "main_thread_id" in json.loads(run.out)


async def test_an_unreachable_database_is_one_line(tmp_path: Path) -> None:
    url = closed_port_url()
    run = await cli("user", "create", "max", env={"MAXCLAW_DATABASE_URL": url},
                    data_dir=tmp_path)
    line = run.assert_one_line_error()
    assert "database" in line
    assert url in line
    # the embedded server was not started instead
    assert not (tmp_path / "pgdata").exists()


async def test_concurrent_migrations_all_succeed(empty_database: str, tmp_path: Path) -> None:
    # replicas starting together on a fresh database each migrate; without the migration lock
    # all but one failed on duplicate catalog entries (most of the time, with three)
    runs = await asyncio.gather(*(
        cli("migrate", "--database-url", empty_database, data_dir=tmp_path) for _ in range(3)))
    for run in runs:
        run.assert_ok()
    head = ScriptDirectory.from_config(migrate.alembic_config("unused")).get_current_head()
    with psycopg.connect(plain_url(empty_database), autocommit=True) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [(head,)]


async def test_a_statement_past_the_command_timeout_names_the_timeout(
        database_url: str, tmp_path: Path) -> None:
    # "unavailable" alone covers a server gone, a connection refused and a statement that
    # outlived MAXCLAW_DB_COMMAND_TIMEOUT_S; an operator needs to know which (CI's slow step
    # once saw six bare "unavailable" lines from `maxclaw sweep` and nothing else)
    with psycopg.connect(plain_url(database_url)) as holder:
        holder.execute("LOCK TABLE message_components IN ACCESS EXCLUSIVE MODE")
        run = await cli("sweep", "--database-url", database_url,
                        env={"MAXCLAW_DB_COMMAND_TIMEOUT_S": "0.5"}, data_dir=tmp_path)
        holder.rollback()
    line = run.assert_one_line_error()
    assert "unavailable" in line
    assert "no answer within 0.5 s, MAXCLAW_DB_COMMAND_TIMEOUT_S" in line
    # with the lock gone the same command sweeps (nothing is due in this database)
    run = await cli("sweep", "--database-url", database_url, data_dir=tmp_path)
    run.assert_ok()
    assert json.loads(run.out) == {"handed_to_main": 0, "kept_open": 0}
