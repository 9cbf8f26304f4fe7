"""Finding 8: the failed-auth lockout covers ``/mcp`` and action tokens, never refuses a valid
token, and sees the real client address only behind a trusted proxy; ``GET /mcp`` opens no
endless stream.

Before: ``/mcp`` neither counted nor checked refused tokens (an address locked out on REST got
200 there); ``GET /mcp`` opened an SSE stream that never ended; action-token guesses were not
counted; an unauthenticated prober locked out every later request from its address, valid
tokens included (behind a proxy, that is everyone); and uvicorn believed ``X-Forwarded-For``
from any local peer, so a prober could pick the address it was counted under.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from tests.conftest import Harness, start_server
from tests.trust.test_quotas import assert_rate_limited, harness_with

LIMIT = 5
TOOLS_LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


def client_at(h: Harness, address: str, token: str | None = None) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=h.app, client=(address, 4000))
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.AsyncClient(transport=transport, base_url="http://test", headers=headers)


async def lock_out(client: httpx.AsyncClient) -> None:
    for n in range(LIMIT):
        resp = await client.get("/v1/threads", headers={"Authorization": f"Bearer guess-{n}"})
        assert resp.status_code == 401, resp.text


async def test_a_valid_token_is_served_from_a_locked_out_address(database_url: str) -> None:
    async with harness_with(database_url, quota_failed_auth_per_minute=LIMIT) as h:
        a = await h.actor("max")
        async with client_at(h, "203.0.113.7") as prober, \
                client_at(h, "203.0.113.7", a.user_token) as neighbour:
            await lock_out(prober)
            assert_rate_limited(await prober.get(
                "/v1/threads", headers={"Authorization": "Bearer guess-next"}), limit=LIMIT)
            # before: 429 — the prober locked out everyone behind the same address
            resp = await neighbour.get("/v1/threads")
            assert resp.status_code == 200, resp.text


async def test_mcp_counts_and_checks_refused_tokens(database_url: str) -> None:
    async with harness_with(database_url, quota_failed_auth_per_minute=LIMIT) as h:
        a = await h.actor("max")
        tid = a.main_thread_id
        async with client_at(h, "203.0.113.8") as prober:
            for n in range(LIMIT):  # guesses on /mcp count like guesses on REST
                resp = await prober.post("/mcp", json=TOOLS_LIST, headers={
                    **MCP_HEADERS, "Authorization": f"Bearer guess-{n}"})
                assert resp.status_code == 401, resp.text
            assert_rate_limited(await prober.get(
                "/v1/threads", headers={"Authorization": "Bearer guess-rest"}), limit=LIMIT)
            # and a locked-out address is refused on /mcp (before: 401 forever, never 429)
            assert_rate_limited(await prober.post("/mcp", json=TOOLS_LIST, headers={
                **MCP_HEADERS, "Authorization": "Bearer guess-mcp"}), limit=LIMIT)
            # its valid agent token still works there
            served = await prober.post("/mcp", json=TOOLS_LIST, headers={
                **MCP_HEADERS, "Authorization": f"Bearer {a.agent_token}",
                "X-MaxClaw-Thread": tid})
            assert served.status_code == 200, served.text


async def test_get_mcp_is_refused_in_stateless_mode(harness: Harness) -> None:
    a = await harness.actor("max")
    async with client_at(harness, "203.0.113.9", a.agent_token) as agent:
        # before: an SSE stream that never ended (300 of them on one token were accepted)
        resp = await asyncio.wait_for(agent.get("/mcp", headers={
            "Accept": "text/event-stream", "X-MaxClaw-Thread": a.main_thread_id}), 10)
    assert resp.status_code == 405, resp.text
    assert resp.headers["allow"] == "POST"
    assert resp.json()["code"] == "method_not_allowed"


async def test_action_token_guesses_are_throttled(database_url: str) -> None:
    async with harness_with(database_url, quota_failed_auth_per_minute=LIMIT) as h, \
            client_at(h, "203.0.113.10") as prober:
        for n in range(LIMIT):
            resp = await prober.post("/v1/push/actions", json={
                "action_token": f"mcat_guess{n}", "action": "opt:yes"})
            assert resp.status_code == 401, resp.text
        # before: 401 for as many guesses as the prober cared to send
        assert_rate_limited(await prober.post("/v1/push/actions", json={
            "action_token": "mcat_guess-next", "action": "opt:yes"}), limit=LIMIT)


async def guesses_from(base_url: str, forwarded_for: str, n: int) -> list[int]:
    async with httpx.AsyncClient(base_url=base_url, timeout=10) as http:
        return [(await http.get("/v1/threads", headers={
            "Authorization": f"Bearer guess-{i}", "X-Forwarded-For": forwarded_for})).status_code
            for i in range(n)]


def test_forwarded_for_is_believed_only_from_a_trusted_proxy(
        database_url: str, tmp_path: Path) -> None:
    quota = {"MAXCLAW_QUOTA_FAILED_AUTH_PER_MINUTE": str(LIMIT)}
    # no proxy configured: X-Forwarded-For is the client's own claim and is ignored, so a
    # prober cannot spread its guesses over invented addresses (before: uvicorn believed it
    # from any local peer)
    srv = start_server(database_url, tmp_path / "plain.log", env=quota)
    try:
        codes = [asyncio.run(guesses_from(srv.base_url, f"198.51.100.{i}", 1))[0]
                 for i in range(LIMIT + 1)]
        assert codes == [401] * LIMIT + [429], codes
    finally:
        srv.stop()
    # behind a trusted proxy (here: the local peer), each real client is counted apart
    srv = start_server(database_url, tmp_path / "proxied.log",
                       env={**quota, "MAXCLAW_FORWARDED_ALLOW_IPS": "127.0.0.1"})
    try:
        assert asyncio.run(guesses_from(srv.base_url, "198.51.100.1", LIMIT + 1))[-1] == 429
        assert asyncio.run(guesses_from(srv.base_url, "198.51.100.2", 1)) == [401]
    finally:
        srv.stop()
