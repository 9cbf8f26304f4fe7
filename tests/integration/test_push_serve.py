"""Inside the real ``maxclaw serve``: the dispatcher job runs, a card posted over HTTP reaches
a webhook, and a push button's answer withdraws it."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from pathlib import Path

import httpx

from tests.cards import CHOICE, new_thread, post_card
from tests.conftest import Harness, start_server
from tests.integration.push_fakes import Endpoint

SECRET = "0123456789abcdef-serve"


async def test_serve_delivers_and_withdraws(harness: Harness, tmp_path: Path) -> None:
    actor = await harness.actor("max")
    async with Endpoint() as endpoint:
        server = await asyncio.to_thread(
            start_server, harness.services.db.url, tmp_path / "serve.log",
            env={"MAXCLAW_PUSH_ALLOW_PRIVATE_URLS": "true"})
        try:
            user = httpx.AsyncClient(base_url=server.base_url, headers={
                "Authorization": f"Bearer {actor.user_token}"})
            agent = httpx.AsyncClient(base_url=server.base_url, headers={
                "Authorization": f"Bearer {actor.agent_token}"})
            async with user, agent:
                resp = await user.post("/v1/push/devices", json={
                    "platform": "webhook", "url": f"{endpoint.url}/h", "secret": SECRET})
                assert resp.status_code == 201, resp.text
                tid = await new_thread(user, title="Served")
                call_id, _ = await post_card(agent, tid, CHOICE)
                await endpoint.wait_delivered(1, timeout_s=30)
                notified = json.loads(endpoint.hits[0].body)
                assert notified["kind"] == "agent-question"
                assert notified["component_id"] == f"{call_id}:q1"
                resp = await user.post("/v1/push/actions", json={
                    "decision_id": notified["decision_id"], "action": "opt:drop"})
                assert resp.status_code == 200, resp.text
                assert resp.json()["settled_via"] == "push"
                await endpoint.wait_delivered(2, timeout_s=30)
        finally:
            server.stop()
    withdrawn = endpoint.hits[-1]
    assert json.loads(withdrawn.body)["kind"] == "withdraw"
    digest = hmac.new(SECRET.encode(), withdrawn.body, hashlib.sha256).hexdigest()
    assert withdrawn.headers["X-MaxClaw-Signature"] == f"sha256={digest}"
