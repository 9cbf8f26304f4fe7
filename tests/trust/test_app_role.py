"""Issue 14, finding 8: ``serve`` runs as a database role without DDL rights; ``maxclaw migrate``
runs as the schema's owner and grants that role rows only.

On the test's real PostgreSQL (the embedded one, or MAXCLAW_TEST_DATABASE_URL): ``migrate``
with ``MAXCLAW_APP_ROLE`` creates the role; the real ``serve`` connects as it and works end to
end (cards, answers, turns, push devices, a token revoke, the sweeper, pruner and push
dispatcher in the background, ``/metrics``); every kind of schema change as that role is
refused by PostgreSQL, and so is writing the schema's version. (Before: there was no such
role: ``serve`` connected as whoever owned the schema.)
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit

import asyncpg
import httpx
import psycopg
import pytest
import yaml
from alembic.script import ScriptDirectory
from psycopg import sql

from maxclaw.auth.service import AuthService
from maxclaw.db.database import Database
from maxclaw.db.migrate import alembic_config
from maxclaw.db.roles import privileged_role
from maxclaw.db.urls import plain_url, with_database
from tests.cards import CHOICE, ask_args
from tests.conftest import start_server

DDL = [
    "CREATE TABLE app_role_probe (id int)",
    "DROP TABLE messages",
    "ALTER TABLE messages ADD COLUMN probe int",
    "ALTER TABLE threads DISABLE TRIGGER ALL",
    "CREATE INDEX ON messages (id)",
    "TRUNCATE messages",
    "CREATE SCHEMA app_role_probe",
    "CREATE FUNCTION public.app_role_probe() RETURNS int LANGUAGE sql AS 'SELECT 1'",
    "CREATE VIEW app_role_probe AS SELECT 1",
    "DROP SEQUENCE maxclaw_rev_seq",
    "UPDATE alembic_version SET version_num = 'forged'",
    "DELETE FROM alembic_version",
]


@dataclass(frozen=True)
class Roles:
    owner_url: str  # the schema's owner (the test server's superuser), direct
    app_url: str  # the service's role, DML only
    name: str
    password: str


def _as_role(url: str, role: str, password: str) -> str:
    parts = urlsplit(plain_url(url))
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    return parts._replace(netloc=f"{quote(role)}:{quote(password)}@{host}").geturl()


@pytest.fixture
def roles(pg_server: str, database_url: str) -> Iterator[Roles]:
    # direct to the server, past PgBouncer when the suite runs behind one
    name = urlsplit(database_url).path.lstrip("/")
    owner = with_database(pg_server, name)
    role, password = f"mc_app_{uuid.uuid4().hex[:12]}", uuid.uuid4().hex
    yield Roles(owner, _as_role(owner, role, password), role, password)
    with psycopg.connect(plain_url(owner), autocommit=True) as conn:  # roles are cluster-wide
        if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
            ident = sql.Identifier(role)
            conn.execute(sql.SQL("DROP OWNED BY {r}").format(r=ident))
            conn.execute(sql.SQL("DROP ROLE {r}").format(r=ident))


async def _cli(*args: str, env: dict[str, str], tmp_path: Path) -> tuple[int, str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("MAXCLAW_")}
    base["MAXCLAW_DATA_DIR"] = str(tmp_path)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "maxclaw.cli", *args, env={**base, **env},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), timeout=90)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def _people(app_url: str) -> tuple[str, str, str]:
    """Max, his user token and a for-Main agent token, written as the service's role."""
    db = Database(app_url, min_size=1, max_size=2)
    await db.open()
    try:
        auth = AuthService(db)
        await auth.create_user("max")
        return ("max", await auth.create_token("max", "user"),
                await auth.create_token("max", "agent", for_main=True))
    finally:
        await db.close()


async def test_serve_works_as_a_role_without_ddl_rights(roles: Roles, tmp_path: Path) -> None:
    env = {"MAXCLAW_DATABASE_URL": roles.app_url, "MAXCLAW_MIGRATE_DATABASE_URL": roles.owner_url,
           "MAXCLAW_APP_ROLE": roles.name, "MAXCLAW_APP_ROLE_PASSWORD": roles.password}
    code, out, err = await _cli("migrate", env=env, tmp_path=tmp_path)
    assert code == 0, err
    assert f"role {roles.name}: created, data rights only (no DDL)" in out
    code, out, err = await _cli("migrate", env=env, tmp_path=tmp_path)  # idempotent
    assert code == 0 and f"role {roles.name}: data rights only" in out, err
    _, user_token, agent_token = await _people(roles.app_url)

    # serve as the role alone (no owner URL): at head, its start-up migration changes nothing
    log = tmp_path / "serve.log"
    server = start_server(roles.app_url, log, env={
        "MAXCLAW_SWEEP_INTERVAL_S": "0.2", "MAXCLAW_PRUNE_INTERVAL_S": "0.2",
        "MAXCLAW_RETENTION_TURNS_DAYS": "0.000001"})
    try:
        await _end_to_end(server.base_url, user_token, agent_token)
        await asyncio.sleep(1.0)  # the sweeper and pruner take a few rounds as the role
    finally:
        server.stop()
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    assert [line for line in lines if line.get("level") in ("error", "critical")] == []
    assert "permission denied" not in log.read_text()
    assert privileged_role(roles.app_url) is None  # data rights only: no warning at start
    assert "a superuser" not in log.read_text() and "the owner of" not in log.read_text()

    conn = await asyncpg.connect(roles.app_url)
    try:
        assert await conn.fetchval("SELECT count(*) FROM messages") > 0  # rows: yes
        refused = []
        for statement in DDL:
            try:
                await conn.execute(statement)
            except asyncpg.InsufficientPrivilegeError:
                refused.append(statement)
        assert refused == DDL
        assert not await conn.fetchval("SELECT rolsuper OR rolcreatedb OR rolcreaterole "
                                       "FROM pg_roles WHERE rolname = current_user")
    finally:
        await conn.close()


async def _end_to_end(base: str, user_token: str, agent_token: str) -> None:
    def client(token: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=base, timeout=15,
                                 headers={"Authorization": f"Bearer {token}"})

    async with client(user_token) as user, client(agent_token) as agent:
        tid = (await user.post("/v1/threads", json={"title": "Work"})).json()["id"]
        resp = await agent.post(f"/v1/agent/threads/{tid}/messages", json={
            "role": "assistant", "content": None, "execute": True, "tool_calls": [
                {"id": "call_r1", "type": "function",
                 "function": {"name": "ask_user_question",
                              "arguments": json.dumps(ask_args(CHOICE))}}]})
        assert resp.status_code == 201, resp.text
        resp = await user.post("/v1/components/call_r1:q1/answer", json={"selected": ["keep"]})
        assert resp.status_code == 200, resp.text
        claim = await agent.post("/v1/agent/turns/claim", json={"wait_s": 5})
        assert claim.status_code == 200, claim.text
        turn = claim.json()["turn"]["id"]
        assert "Keep one version" in json.dumps(claim.json()["messages"])
        assert (await agent.post(f"/v1/agent/turns/{turn}/inbox")).status_code == 200
        assert (await agent.post(f"/v1/agent/turns/{turn}/finish")).status_code == 200
        assert (await user.post("/v1/push/devices", json={"platform": "log"})).status_code == 201
        ticket = await user.post("/v1/ws-ticket")
        assert ticket.status_code == 200, ticket.text
        tokens = (await user.get("/v1/tokens")).json()
        agent_id = next(t["id"] for t in tokens["tokens"] if t["role"] == "agent")
        assert (await user.delete(f"/v1/tokens/{agent_id}")).status_code == 204
        assert (await agent.get("/v1/agent/tools")).status_code == 401  # revoked at once
        assert (await user.get("/metrics")).status_code == 200
        assert (await user.get("/readyz")).status_code == 200


async def test_the_role_cannot_migrate_and_is_told_who_can(roles: Roles, tmp_path: Path) -> None:
    code, _, err = await _cli("db", "grant-app-role", roles.name,
                              env={"MAXCLAW_DATABASE_URL": roles.app_url,
                                   "MAXCLAW_MIGRATE_DATABASE_URL": roles.owner_url,
                                   "MAXCLAW_APP_ROLE_PASSWORD": roles.password},
                              tmp_path=tmp_path)
    assert code == 0, err
    # the schema's owner (a superuser here) and PostgreSQL's own roles are refused
    owner = urlsplit(roles.owner_url).username or "postgres"
    for name, why in ((owner, "a superuser"), ("pg_monitor", "cannot be the service's role")):
        code, _, err = await _cli("db", "grant-app-role", name, "--database-url",
                                  roles.owner_url, env={}, tmp_path=tmp_path)
        assert code == 1 and why in err, err
    # one migration behind: the service's role alone may not apply it
    script = ScriptDirectory.from_config(alembic_config(roles.owner_url))
    head = script.get_revision(script.get_current_head())
    assert head is not None and isinstance(head.down_revision, str)
    with psycopg.connect(plain_url(roles.owner_url), autocommit=True) as conn:
        conn.execute("UPDATE alembic_version SET version_num = %s", (head.down_revision,))
    code, _, err = await _cli("migrate", env={"MAXCLAW_DATABASE_URL": roles.app_url},
                              tmp_path=tmp_path)
    assert code == 1
    assert "this role may not change the schema" in err
    assert "MAXCLAW_MIGRATE_DATABASE_URL" in err and roles.password not in err


def test_compose_runs_the_api_as_the_app_role() -> None:
    """docker-compose.yml (and the PgBouncer overlay): the API connects as the role ``migrate``
    grants, never as the schema's owner, which only ``migrate`` uses."""
    root = Path(__file__).resolve().parents[2]
    base = yaml.safe_load((root / "docker-compose.yml").read_text())
    pooled = yaml.safe_load((root / "docker-compose.pgbouncer.yml").read_text())
    migrate = base["services"]["migrate"]["environment"]
    owner = urlsplit(migrate["MAXCLAW_MIGRATE_DATABASE_URL"]).username
    assert owner == base["services"]["postgres"]["environment"]["POSTGRES_USER"]
    app = migrate["MAXCLAW_APP_ROLE"]
    assert app != owner
    urls = [base["services"]["api"]["environment"]["MAXCLAW_DATABASE_URL"],
            pooled["services"]["pgbouncer"]["environment"]["DATABASE_URL"],
            *(v for k, v in pooled["services"]["api"]["environment"].items()
              if k.endswith("DATABASE_URL"))]
    assert [urlsplit(url).username for url in urls] == [app] * len(urls)
    assert "MAXCLAW_MIGRATE_DATABASE_URL" not in base["services"]["api"]["environment"]
