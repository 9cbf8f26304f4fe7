"""A message's size and search documents are written by the trigger ``maxclaw_messages_derived``
(live.sql, 0027_messages_derived), no longer by generated columns: each stored value must equal
the declared expression (``schema.MESSAGE_SIZE``, ``search_sql.SEARCH_FTS``, ``SEARCH_HAN``)
evaluated on the row as it is now, after inserts and after every kind of update, whatever a
writer tried to put in those columns itself."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from maxclaw.db.schema import MESSAGE_SIZE, SEARCH_FTS, SEARCH_HAN
from maxclaw.db.urls import plain_url

ASK = [{"id": "c1", "name": "ask_user_question", "arguments": {
    "title": "部署到生产环境", "questions": [{"id": "q1", "question": "Deploy kubectl now?",
                                          "options": [{"id": "y", "label": "Yes, roll out"}]}]}},
       {"id": "c2", "name": "run_shell", "arguments": {"command": "rm -rf /tmp/never-searched"}}]

# role, body, tool_calls, tool_call_id, display, source_meta, sensitive
ROWS: list[tuple[Any, ...]] = [
    ("user", "Please deploy the 部署 service", None, None, None, None, False),
    ("user", "my password is hunter2", None, None, None, None, True),  # a secret: no documents
    ("assistant", None, ASK, None, {"v": 1, "states": {}}, None, False),
    ("assistant", "Working on it", [ASK[1]], None, None, {"model": "m"}, False),
    ("tool", "result text", None, "c1", {"v": 1, "states": {"c1:q1": {"status": "open"}}},
     None, False),
    ("event", "a background job finished", None, None, None, {"job": "j1"}, False),
    ("user", None, None, None, None, None, False),
    ("user", "long " + "字" * 25_000, None, None, None, None, False),  # past the 20,000 cut
]

@pytest.fixture
async def conn(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(plain_url(database_url))
    yield connection
    await connection.close()


CHECK = f"""
SELECT id, size = ({MESSAGE_SIZE}) AS size_ok,
       search_fts IS NOT DISTINCT FROM ({SEARCH_FTS}) AS fts_ok,
       search_han IS NOT DISTINCT FROM ({SEARCH_HAN}) AS han_ok,
       size, search_fts IS NULL AS no_documents
  FROM messages WHERE user_id = $1::uuid ORDER BY id
"""


async def _insert(conn: asyncpg.Connection, user_id: str, thread_id: str,
                  row: tuple[Any, ...]) -> int:
    role, body, tool_calls, tool_call_id, display, source_meta, sensitive = row
    return int(await conn.fetchval(
        "INSERT INTO messages (user_id, thread_id, role, body, tool_calls, tool_call_id,"
        " display, source_meta, sensitive) VALUES ($1::uuid, $2::uuid, $3, $4, $5::jsonb, $6,"
        " $7::jsonb, $8::jsonb, $9) RETURNING id",
        user_id, thread_id, role, body, _json(tool_calls), tool_call_id, _json(display),
        _json(source_meta), sensitive))


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False)


async def _assert_derived(conn: asyncpg.Connection, user_id: str) -> list[asyncpg.Record]:
    rows = await conn.fetch(CHECK, user_id)
    wrong = [dict(r) for r in rows if not (r["size_ok"] and r["fts_ok"] and r["han_ok"])]
    assert rows and not wrong, wrong
    return rows


async def _fixture(conn: asyncpg.Connection) -> tuple[str, str, list[int]]:
    user_id = str(await conn.fetchval("INSERT INTO users (name) VALUES ('max') RETURNING id"))
    thread_id = str(await conn.fetchval(
        "INSERT INTO threads (user_id, kind, title) VALUES ($1::uuid, 'normal', 't')"
        " RETURNING id", user_id))
    ids = [await _insert(conn, user_id, thread_id, row) for row in ROWS]
    return user_id, thread_id, ids


async def test_inserted_rows_get_the_declared_values(conn: asyncpg.Connection) -> None:
    user_id, _, ids = await _fixture(conn)
    rows = {r["id"]: r for r in await _assert_derived(conn, user_id)}
    # the expressions are not trivially NULL: the searchable rows have documents, the secret
    # and the tool, event and empty rows none
    searchable = {ids[0], ids[2], ids[3], ids[6], ids[7]}
    assert {i for i, r in rows.items() if not r["no_documents"]} == searchable
    found = await conn.fetch(
        "SELECT id FROM messages WHERE user_id = $1::uuid AND (search_fts @@"
        " to_tsquery('english', 'kubectl') OR search_han @@ phraseto_tsquery('simple', '部 署'))"
        " ORDER BY id", user_id)
    assert [r["id"] for r in found] == [ids[0], ids[2]]  # not the secret, not the shell call


async def test_updates_recompute_what_changed_and_keep_the_rest(
        conn: asyncpg.Connection) -> None:
    user_id, _, ids = await _fixture(conn)
    before = {r["id"]: r for r in await _assert_derived(conn, user_id)}
    # the card mirror: display alone; the size follows, the documents stay
    await conn.execute(
        "UPDATE messages SET display = jsonb_set(display, '{states,c1:q1,status}', '\"answered\"')"
        " WHERE user_id = $1::uuid AND id = $2", user_id, ids[4])
    await conn.execute("UPDATE messages SET display = '{\"v\": 1, \"pinned\": true}'::jsonb"
                       " WHERE user_id = $1::uuid AND id = $2", user_id, ids[0])
    after = {r["id"]: r for r in await _assert_derived(conn, user_id)}
    assert after[ids[4]]["size"] > before[ids[4]]["size"]
    assert after[ids[0]]["size"] > before[ids[0]]["size"]
    # the text changes: body, tool calls, and a row becoming sensitive (its documents go)
    await conn.execute("UPDATE messages SET body = 'kubectl rollout 上线' WHERE user_id = $1::uuid"
                       " AND id = $2", user_id, ids[6])
    await conn.execute("UPDATE messages SET tool_calls = $3::jsonb WHERE user_id = $1::uuid"
                       " AND id = $2", user_id, ids[3], _json(ASK))
    await conn.execute("UPDATE messages SET sensitive = true WHERE user_id = $1::uuid"
                       " AND id = $2", user_id, ids[0])
    after = {r["id"]: r for r in await _assert_derived(conn, user_id)}
    assert after[ids[0]]["no_documents"] and not after[ids[6]]["no_documents"]
    # many rows in one statement, as a sweep writes them
    await conn.execute("UPDATE messages SET delivered_at = now(), body = body || '!'"
                       " WHERE user_id = $1::uuid", user_id)
    await _assert_derived(conn, user_id)


async def test_a_writer_cannot_put_its_own_values(conn: asyncpg.Connection) -> None:
    """The columns were generated (a writer could not set them); now a trigger overwrites
    whatever a statement gives them, on insert and on update."""
    user_id, thread_id, ids = await _fixture(conn)
    await conn.execute(
        "INSERT INTO messages (user_id, thread_id, role, body, size, search_fts, search_han)"
        " VALUES ($1::uuid, $2::uuid, 'user', 'plain words', 1, 'forged'::tsvector,"
        " 'forged'::tsvector)", user_id, thread_id)
    await conn.execute("UPDATE messages SET size = 0, search_fts = 'forged'::tsvector,"
                       " search_han = NULL WHERE user_id = $1::uuid AND id = $2", user_id, ids[0])
    await _assert_derived(conn, user_id)
    assert await conn.fetchval("SELECT count(*) FROM messages WHERE user_id = $1::uuid AND"
                               " search_fts @@ 'forged'::tsquery", user_id) == 0
