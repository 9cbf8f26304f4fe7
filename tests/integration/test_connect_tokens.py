"""Issue 32 item 3 over HTTP: a signed-in user mints thread-bound agent tokens for his own
threads (never another user's, never Main's, never a user token), lists them with their
thread and last use, and signs a phone in with a one-time code (single use, short-lived,
stored hashed, refusals counted toward the per-address lockout). Every refusal writes no row."""

from __future__ import annotations

import hashlib
from typing import Any

import httpx

from maxclaw.db.database import connect
from tests.conftest import Actor, Harness
from tests.trust.test_quotas import assert_rate_limited, harness_with

MCP_HEADERS = {"Accept": "application/json, text/event-stream"}
TOOLS_LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}


async def counts(url: str) -> dict[str, Any]:
    """The rows a refusal must leave alone."""
    conn = await connect(url)
    try:
        row = await conn.fetchrow(
            "SELECT (SELECT count(*) FROM api_tokens) AS tokens,"
            " (SELECT count(*) FROM threads) AS threads,"
            " (SELECT count(*) FROM signin_codes) AS codes,"
            " (SELECT count(*) FROM signin_codes WHERE used_at IS NOT NULL) AS used")
    finally:
        await conn.close()
    return dict(row)


async def new_thread(who: Actor, title: str) -> str:
    resp = await who.user.post("/v1/threads", json={"title": title})
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


async def test_a_user_mints_an_agent_token_bound_to_his_thread(harness: Harness,
                                                               database_url: str) -> None:
    max_ = await harness.actor("max")
    thread = await new_thread(max_, "Refactor")
    resp = await max_.user.post("/v1/tokens", json={
        "role": "agent", "thread_id": thread, "name": "Claude Code", "expires_in_days": 30})
    assert resp.status_code == 201, resp.text
    minted = resp.json()
    assert minted["token"].startswith("mc_a_") and minted["thread_id"] == thread
    assert minted["role"] == "agent" and minted["name"] == "Claude Code"
    assert minted["expires_at"] is not None
    # only its hash is kept
    conn = await connect(database_url)
    try:
        stored = await conn.fetchval("SELECT token_hash FROM api_tokens WHERE id = $1",
                                     minted["id"])
    finally:
        await conn.close()
    assert stored == hashlib.sha256(minted["token"].encode()).hexdigest()

    agent = harness.with_token(minted["token"])
    tools = await agent.post("/mcp", json=TOOLS_LIST, headers=MCP_HEADERS)
    assert tools.status_code == 200, tools.text
    assert "ask_user_question" in tools.text
    # bound: Main's thread is not its to read
    other = await agent.get(f"/v1/agent/threads/{max_.main_thread_id}/history")
    assert other.status_code == 404, other.text

    listed = {t["id"]: t for t in (await max_.user.get("/v1/tokens")).json()["tokens"]}
    row = listed[minted["id"]]
    assert row["thread_id"] == thread and row["thread_title"] == "Refactor"
    assert row["name"] == "Claude Code" and row["role"] == "agent"
    assert row["last_used_at"] is not None  # stamped by the /mcp call above
    assert "token" not in row

    assert (await max_.user.delete(f"/v1/tokens/{minted['id']}")).status_code == 204
    refused = await agent.post("/mcp", json=TOOLS_LIST, headers=MCP_HEADERS)
    assert refused.status_code == 401, refused.text
    await agent.aclose()


async def test_a_new_thread_is_made_for_the_token(harness: Harness) -> None:
    max_ = await harness.actor("max")
    resp = await max_.user.post("/v1/tokens", json={"new_thread": {"title": "From Codex"}})
    assert resp.status_code == 201, resp.text
    thread = await max_.user.get(f"/v1/threads/{resp.json()['thread_id']}")
    assert thread.status_code == 200 and thread.json()["title"] == "From Codex"


async def test_refused_mints_write_nothing(harness: Harness, database_url: str) -> None:
    max_ = await harness.actor("max")
    eve = await harness.actor("eve")
    eves = await new_thread(eve, "Eve's")
    mine = await new_thread(max_, "Mine")
    before = await counts(database_url)
    cases: list[tuple[Any, int, str]] = [
        ({"role": "agent", "thread_id": eves}, 404, "not_found"),  # another user's thread
        ({"thread_id": "not-a-uuid"}, 404, "not_found"),
        ({"thread_id": max_.main_thread_id}, 403, "forbidden"),  # Main's token: the operator's
        ({"role": "agent", "for_main": True, "new_thread": {"title": "x"}}, 403, "forbidden"),
        ({"role": "user", "thread_id": mine}, 422, "invalid"),  # a user token: never here
        ({"role": "user", "new_thread": {"title": "x"}}, 422, "invalid"),
        ({}, 422, "invalid"),
        ({"thread_id": mine, "new_thread": {"title": "x"}}, 422, "invalid"),
        ({"thread_id": mine, "expires_in_days": 0}, 422, "invalid"),
        ({"new_thread": {"title": ""}}, 422, "invalid"),
    ]
    for body, status, code in cases:
        resp = await max_.user.post("/v1/tokens", json=body)
        assert resp.status_code == status, (body, resp.text)
        assert resp.json()["code"] == code and resp.json()["message"], resp.text
    # an agent token mints nothing, not even for its own user
    resp = await max_.agent.post("/v1/tokens", json={"thread_id": mine})
    assert resp.status_code == 403, resp.text
    resp = await max_.agent.post("/v1/signin/codes", json={})
    assert resp.status_code == 403, resp.text
    assert await counts(database_url) == before


async def code_for(who: Actor) -> dict[str, Any]:
    resp = await who.user.post("/v1/signin/codes", json={"origin": "https://claw.example"})
    assert resp.status_code == 201, resp.text
    return dict(resp.json())


async def test_a_signin_code_signs_in_once(harness: Harness, database_url: str) -> None:
    max_ = await harness.actor("max")
    code = await code_for(max_)
    assert code["url"] == f"https://claw.example/#signin={code['code']}"
    assert code["qr_svg"].lstrip().startswith("<svg")
    conn = await connect(database_url)
    try:
        stored = await conn.fetchrow("SELECT code_hash, expires_at - created_at AS life"
                                     " FROM signin_codes")
    finally:
        await conn.close()
    assert stored["code_hash"] == hashlib.sha256(code["code"].encode()).hexdigest()
    assert stored["life"].total_seconds() == 300

    resp = await harness.client.post("/v1/signin/redeem",
                                     json={"code": code["code"], "name": "phone"})
    assert resp.status_code == 201, resp.text
    token = resp.json()["token"]
    assert token.startswith("mc_u_") and resp.json()["user"] == "max"
    phone = harness.with_token(token)
    me = await phone.get("/v1/me")
    assert me.status_code == 200 and me.json()["user_id"] == max_.user_id
    await phone.aclose()

    before = await counts(database_url)
    again = await harness.client.post("/v1/signin/redeem", json={"code": code["code"]})
    assert again.status_code == 409, again.text
    assert again.json()["code"] == "conflict" and "already used" in again.json()["message"]
    unknown = await harness.client.post("/v1/signin/redeem", json={"code": "mc_s_nothing"})
    assert unknown.status_code == 401 and unknown.json()["code"] == "unauthorized"
    assert await counts(database_url) == before


async def test_an_expired_code_is_refused(harness: Harness, database_url: str) -> None:
    max_ = await harness.actor("max")
    code = await code_for(max_)
    conn = await connect(database_url)
    try:
        await conn.execute("UPDATE signin_codes SET expires_at = now() - interval '1 second'")
    finally:
        await conn.close()
    before = await counts(database_url)
    resp = await harness.client.post("/v1/signin/redeem", json={"code": code["code"]})
    assert resp.status_code == 409, resp.text
    assert "expired" in resp.json()["message"]
    assert await counts(database_url) == before


async def test_refused_codes_count_toward_the_lockout(database_url: str) -> None:
    limit = 3
    async with harness_with(database_url, quota_failed_auth_per_minute=limit) as h:
        max_ = await h.actor("max")
        code = await code_for(max_)
        guesser = httpx.AsyncClient(transport=httpx.ASGITransport(app=h.app,
                                                                  client=("10.9.8.7", 4000)),
                                    base_url="http://test")
        for n in range(limit):
            resp = await guesser.post("/v1/signin/redeem", json={"code": f"mc_s_guess{n}"})
            assert resp.status_code == 401, resp.text
        locked = await guesser.post("/v1/signin/redeem", json={"code": "mc_s_guess-more"})
        assert_rate_limited(locked, limit)
        # a REST bearer guess from that address is locked out too: one counter
        assert_rate_limited(await guesser.get(
            "/v1/threads", headers={"Authorization": "Bearer nope"}), limit)
        # the valid code is still served from there (a good credential is never refused)
        ok = await guesser.post("/v1/signin/redeem", json={"code": code["code"]})
        assert ok.status_code == 201, ok.text
        await guesser.aclose()
