"""``maxclaw user list [--json]`` and ``maxclaw user delete NAME [--force]`` (issue 30, item 4),
run as operators run them: a delete takes every row of the user (found through the catalogue:
every table carries user_id), refuses while a turn of theirs runs unless ``--force``, and a
refusal changes no row."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.cards import CHOICE, post_card
from tests.conftest import Harness
from tests.integration.test_cli import cli
from tests.integration.test_threads_manage import add_device, new_thread, table_counts

pytestmark = pytest.mark.timeout(300)


async def rows_of(harness: Harness, user_id: str) -> dict[str, int]:
    async with harness.services.db.connection() as conn:
        tables = [r["table_name"] for r in await conn.fetch(
            "SELECT c.table_name FROM information_schema.columns c"
            " JOIN information_schema.tables t ON t.table_schema = c.table_schema"
            "  AND t.table_name = c.table_name AND t.table_type = 'BASE TABLE'"
            " WHERE c.table_schema = 'public' AND c.column_name = 'user_id' ORDER BY 1")]
        found = {t: int(await conn.fetchval(
            f'SELECT count(*) FROM "{t}" WHERE user_id = $1::uuid', user_id)) for t in tables}
        found["users"] = int(await conn.fetchval(
            "SELECT count(*) FROM users WHERE id = $1::uuid", user_id))
    return found


async def test_list_and_delete_users(harness: Harness, database_url: str,
                                     tmp_path: Path) -> None:
    db = ("--database-url", database_url)
    a = await harness.actor("max")
    b = await harness.actor("ann")
    tid = await new_thread(a)
    await post_card(a.agent, tid, CHOICE)
    async with harness.services.db.transaction() as conn:
        await add_device(conn, a.user_id)

    listed = await cli("user", "list", "--json", *db, data_dir=tmp_path)
    listed.assert_ok()
    users = {u["name"]: u for u in json.loads(listed.out)["users"]}
    assert users["max"]["id"] == a.user_id and users["max"]["threads"] == 2
    assert users["max"]["tokens"] == 2 and users["max"]["devices"] == 1
    table = await cli("user", "list", *db, data_dir=tmp_path)
    table.assert_ok()
    assert table.out.splitlines()[0].split()[:2] == ["name", "id"] and "ann" in table.out

    # a running turn refuses the delete, and nothing changes
    assert (await a.user.post(f"/v1/threads/{tid}/messages", json={"body": "go"})
            ).status_code == 201
    claimed = await a.agent.post("/v1/agent/turns/claim", json={"wait_s": 0,
                                                                "runtime_id": "rt"})
    assert claimed.status_code == 200, claimed.text
    async with harness.services.db.connection() as conn:
        counts = await table_counts(conn)
    refused = await cli("user", "delete", "max", *db, data_dir=tmp_path)
    assert "running" in refused.assert_one_line_error()
    unknown = await cli("user", "delete", "nobody", *db, data_dir=tmp_path)
    assert "nobody" in unknown.assert_one_line_error()
    async with harness.services.db.connection() as conn:
        assert await table_counts(conn) == counts

    before = await rows_of(harness, a.user_id)
    assert before["messages"] and before["message_components"] and before["push_devices"]
    forced = await cli("user", "delete", "max", "--force", *db, data_dir=tmp_path)
    forced.assert_ok()
    assert a.user_id in forced.out
    assert all(n == 0 for n in (await rows_of(harness, a.user_id)).values())
    # every replica drops the user's tokens (the revoke's NOTIFY), as for a revoke: within 1 s
    for _ in range(40):
        if (await a.user.get("/v1/me")).status_code == 401:
            break
        await asyncio.sleep(0.05)
    assert (await a.user.get("/v1/me")).status_code == 401
    assert (await b.user.get("/v1/me")).status_code == 200  # the others are untouched
    assert (await rows_of(harness, b.user_id))["threads"] == 1
