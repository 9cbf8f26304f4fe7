"""Max's threads (issue 30, item 3) and GET /v1/me (item 4), over HTTP on a real database:
rename, archive (open cards withdrawn through the withdraw transition, reason ``archived``, or
kept open; any new message brings the thread back), delete (every row of the thread in every
table, found through the catalogue; each device's notification withdrawn), and refusals that
change no row."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import asyncpg

from tests.cards import CHOICE, SECRET, TEXT, post_card
from tests.conftest import Actor, Harness

PLANTED = "tok-1f0c-planted-secret-value"


async def new_thread(a: Actor, title: str = "Work") -> str:
    resp = await a.user.post("/v1/threads", json={"title": title})
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


async def add_device(conn: Any, user_id: str) -> int:
    url = "http://127.0.0.1:9/hook"
    return int(await conn.fetchval(
        "INSERT INTO push_devices (user_id, platform, config, secret) VALUES ($1, 'webhook', $2,"
        " $3) RETURNING id", user_id, {"url": url, "address": url}, "s" * 16))


async def table_counts(conn: asyncpg.Connection) -> dict[str, int]:
    """Rows of every table of the schema (the catalogue's list, not a list of ours)."""
    tables = [r["table_name"] for r in await conn.fetch(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
        " AND table_type = 'BASE TABLE' ORDER BY 1")]
    return {t: int(await conn.fetchval(f'SELECT count(*) FROM "{t}"')) for t in tables}


async def rows_naming(conn: asyncpg.Connection, thread_id: str,
                      component_ids: list[str]) -> dict[str, int]:
    """Rows that name the thread, in every table with a thread column (from the catalogue),
    plus the audit rows of its components and any push payload that names it."""
    found: dict[str, int] = {}
    for r in await conn.fetch(
            "SELECT c.table_name FROM information_schema.columns c"
            " JOIN information_schema.tables t ON t.table_schema = c.table_schema"
            "  AND t.table_name = c.table_name AND t.table_type = 'BASE TABLE'"
            " WHERE c.table_schema = 'public' AND c.column_name = 'thread_id' ORDER BY 1"):
        n = int(await conn.fetchval(
            f'SELECT count(*) FROM "{r["table_name"]}" WHERE thread_id = $1::uuid', thread_id))
        found[r["table_name"]] = n
    found["threads"] = int(await conn.fetchval(
        "SELECT count(*) FROM threads WHERE id = $1::uuid", thread_id))
    found["component_audit"] = int(await conn.fetchval(
        "SELECT count(*) FROM component_audit WHERE component_id = ANY($1::text[])",
        component_ids))
    found["push_outbox payloads"] = int(await conn.fetchval(
        "SELECT count(*) FROM push_outbox WHERE payload::text LIKE '%' || $1 || '%'", thread_id))
    return found


async def test_rename_archive_withdraws_open_cards_and_a_message_brings_it_back(
        harness: Harness) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a, "Old name")
    _, posted = await post_card(a.agent, tid, CHOICE, TEXT)
    ids = [c["id"] for c in posted["components"]]

    resp = await a.user.patch(f"/v1/threads/{tid}", json={"title": "  New name  "})
    assert resp.status_code == 200, resp.text
    assert resp.json()["title"] == "New name" and resp.json()["archived_at"] is None

    resp = await a.user.patch(f"/v1/threads/{tid}", json={"archived": True})
    assert resp.status_code == 200, resp.text
    assert resp.json()["archived_at"] is not None and resp.json()["open_cards"] == 0
    for cid in ids:
        got = (await a.user.get(f"/v1/components/{cid}")).json()
        assert got["status"] == "withdrawn" and got["withdrawn_reason"] == "archived"
    listed = [t["id"] for t in (await a.user.get("/v1/threads")).json()["threads"]]
    assert tid not in listed
    everything = (await a.user.get("/v1/threads?archived=true")).json()["threads"]
    assert tid in [t["id"] for t in everything]
    async with harness.services.db.connection() as conn:
        carriers = await conn.fetch(
            "SELECT status, settled_via FROM decisions WHERE user_id = $1::uuid"
            " AND thread_id = $2::uuid", a.user_id, tid)
    assert all(r["status"] == "settled" and r["settled_via"] == "withdrawn" for r in carriers)

    # any new message brings it back: Max's, or the agent's
    resp = await a.user.post(f"/v1/threads/{tid}/messages", json={"body": "back to it"})
    assert resp.status_code == 201
    assert (await a.user.get(f"/v1/threads/{tid}")).json()["archived_at"] is None
    assert (await a.user.patch(f"/v1/threads/{tid}", json={"archived": True})).status_code == 200
    resp = await a.agent.post(f"/v1/agent/threads/{tid}/messages",
                              json={"role": "assistant", "content": "still here"})
    assert resp.status_code == 201, resp.text
    assert tid in [t["id"] for t in (await a.user.get("/v1/threads")).json()["threads"]]


async def test_archive_can_keep_the_cards_open_and_be_undone(harness: Harness) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a)
    _, posted = await post_card(a.agent, tid, CHOICE)
    cid = posted["components"][0]["id"]
    resp = await a.user.patch(f"/v1/threads/{tid}",
                              json={"archived": True, "keep_cards_open": True})
    assert resp.status_code == 200 and resp.json()["archived_at"] is not None
    assert (await a.user.get(f"/v1/components/{cid}")).json()["status"] == "open"
    resp = await a.user.patch(f"/v1/threads/{tid}", json={"archived": False})
    assert resp.status_code == 200 and resp.json()["archived_at"] is None


async def test_delete_leaves_no_row_of_the_thread_and_withdraws_each_device(
        harness: Harness) -> None:
    a = await harness.actor("max")
    keep = await new_thread(a, "Kept")
    tid = await new_thread(a, "Doomed")
    async with harness.services.db.transaction() as conn:
        devices = [await add_device(conn, a.user_id) for _ in range(2)]
    _, posted = await post_card(a.agent, tid, CHOICE, SECRET)
    ids = [c["id"] for c in posted["components"]]
    _, kept_card = await post_card(a.agent, keep, CHOICE)
    # a secret answered (a sealed box), a notification sent to each device, a bound token,
    # presence on the thread, an audit trail
    resp = await a.user.post(f"/v1/components/{ids[1]}/answer", json={"text": PLANTED})
    assert resp.status_code == 200, resp.text
    async with harness.services.db.transaction() as conn:
        await conn.execute("UPDATE push_outbox SET status = 'sent', attempts = 1"
                           " WHERE user_id = $1::uuid AND kind = 'notify'", a.user_id)
        await conn.execute("INSERT INTO presence (connection_id, user_id, thread_id, expires_at)"
                           " VALUES ('c1', $1::uuid, $2::uuid, now() + interval '1 minute')",
                           a.user_id, tid)
    minted = await a.user.post("/v1/tokens", json={"role": "agent", "thread_id": tid})
    assert minted.status_code == 201
    bound = harness.with_token(minted.json()["token"])
    assert (await bound.get(f"/v1/agent/threads/{tid}/components")).status_code == 200
    async with harness.services.db.connection() as conn:
        before = await rows_naming(conn, tid, ids)
        notified = {r["device_id"] for r in await conn.fetch(
            "SELECT o.device_id FROM push_outbox o JOIN decisions d ON d.user_id = o.user_id"
            " AND d.id = o.decision_id WHERE d.thread_id = $1::uuid AND o.kind = 'notify'"
            " AND d.component_id = $2", tid, ids[0])}
    for table in ("messages", "message_components", "decisions", "message_secrets", "presence",
                  "api_tokens", "component_audit", "push_outbox payloads"):
        assert before[table] > 0, (table, before)
    assert notified == set(devices)

    assert (await a.user.delete(f"/v1/threads/{tid}")).status_code == 422  # no confirm
    resp = await a.user.delete(f"/v1/threads/{tid}?confirm={tid}")
    assert resp.status_code == 204, resp.text

    async with harness.services.db.connection() as conn:
        after = await rows_naming(conn, tid, ids)
        withdraws = await conn.fetch(
            "SELECT device_id, decision_id, payload FROM push_outbox"
            " WHERE user_id = $1::uuid AND kind = 'withdraw'", a.user_id)
        kept_rows = await conn.fetchval(
            "SELECT count(*) FROM messages WHERE thread_id = $1::uuid", keep)
    assert all(n == 0 for n in after.values()), after
    # the open question's notification is withdrawn on each device (the answered one's
    # withdraw was queued by its answer and survives too)
    open_collapse = {json.loads(r["payload"])["collapse_id"] if isinstance(r["payload"], str)
                     else r["payload"]["collapse_id"]
                     for r in withdraws if r["decision_id"] is None}
    assert len(open_collapse) >= 1
    assert {r["device_id"] for r in withdraws} == set(devices)
    assert kept_rows > 0
    # the token bound to it is refused at once (announced as revoked, within 1 s)
    for _ in range(40):
        if (await bound.get("/v1/agent/tools")).status_code == 401:
            break
        await asyncio.sleep(0.05)
    assert (await bound.get("/v1/agent/tools")).status_code == 401
    assert (await a.user.get(f"/v1/components/{kept_card['components'][0]['id']}")
            ).status_code == 200

    # twice: 404, and nothing changes
    async with harness.services.db.connection() as conn:
        counts = await table_counts(conn)
    resp = await a.user.delete(f"/v1/threads/{tid}?confirm={tid}")
    assert resp.status_code == 404 and resp.json()["code"] == "not_found"
    async with harness.services.db.connection() as conn:
        assert await table_counts(conn) == counts


async def test_refusals_change_no_row(harness: Harness) -> None:
    a = await harness.actor("max")
    b = await harness.actor("ann")
    tid = await new_thread(a)
    await post_card(a.agent, tid, CHOICE)
    async with harness.services.db.connection() as conn:
        counts = await table_counts(conn)

    refusals: list[tuple[Any, int, str]] = [
        (await a.user.patch(f"/v1/threads/{tid}", json={}), 422, "invalid"),
        (await a.user.patch(f"/v1/threads/{tid}", json={"title": "   "}), 422, "invalid"),
        (await a.user.patch(f"/v1/threads/{tid}", json={"title": "x" * 501}), 422, "invalid"),
        (await a.user.patch(f"/v1/threads/{tid}", json={"colour": "red"}), 422, "invalid"),
        (await b.user.patch(f"/v1/threads/{tid}", json={"archived": True}), 404, "not_found"),
        (await a.user.patch("/v1/threads/not-a-uuid", json={"title": "x"}), 404, "not_found"),
        (await a.user.patch(f"/v1/threads/{a.main_thread_id}", json={"archived": True}), 409,
         "conflict"),
        (await a.user.delete(f"/v1/threads/{tid}"), 422, "invalid"),
        (await a.user.delete(f"/v1/threads/{tid}?confirm={a.main_thread_id}"), 422, "invalid"),
        (await b.user.delete(f"/v1/threads/{tid}?confirm={tid}"), 404, "not_found"),
        (await a.user.delete(f"/v1/threads/{a.main_thread_id}?confirm={a.main_thread_id}"), 409,
         "conflict"),
        (await a.agent.patch(f"/v1/threads/{tid}", json={"archived": True}), 403, "forbidden"),
        (await a.agent.delete(f"/v1/threads/{tid}?confirm={tid}"), 403, "forbidden"),
    ]
    for resp, status, code in refusals:
        assert (resp.status_code, resp.json()["code"]) == (status, code), resp.text
    confirm = await a.user.delete(f"/v1/threads/{tid}")
    assert confirm.json()["data"]["errors"][0]["loc"] == ["query", "confirm"]
    async with harness.services.db.connection() as conn:
        assert await table_counts(conn) == counts


async def test_me_says_who_and_what(harness: Harness) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a)
    assert (await a.user.patch(f"/v1/threads/{tid}", json={"archived": True})).status_code == 200
    me = (await a.user.get("/v1/me")).json()
    assert me["user_id"] == a.user_id and me["name"] == "max"
    assert me["main_thread_id"] == a.main_thread_id
    assert me["threads"] == 1 and me["archived_threads"] == 1  # Main, and the archived one
    assert me["tokens"] == 2 and me["devices"] == 0
    assert me["settings"]["secret_ttl_s"] == 7 * 86400
    assert me["settings"]["search_max_query_chars"] == 200
