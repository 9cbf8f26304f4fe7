"""Action tokens end to end: a Web Push device on a local endpoint receives the encrypted
notification, the test decrypts it as the browser would, and answers with the token it carries
(no bearer token). Refusals (replay, another decision, after settlement, stale, expired,
unknown, removed device) write nothing."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from maxclaw.app import create_app
from tests.cards import CHOICE, SECRET, new_thread, post_card
from tests.conftest import Actor, Harness, app_settings
from tests.integration.push_fakes import Endpoint
from tests.integration.test_main_handoff import main_tool
from tests.integration.test_push_delivery import VAPID_PEM, Subscriber


@pytest.fixture
async def push(database_url: str) -> AsyncIterator[Harness]:
    settings = app_settings(database_url, push_allow_private_urls=True,
                            vapid_private_key=VAPID_PEM, push_backoff_base_s=0.05,
                            push_backoff_max_s=0.2, push_max_attempts=3)
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")
        yield Harness(app=app, services=app.state.services, client=client)
        await client.aclose()
        await app.state.services.push.dispatcher.close()


class Phone:
    """One registered browser: its keys, its endpoint on 127.0.0.1, its device id."""

    def __init__(self, endpoint: Endpoint, device_id: int, subscriber: Subscriber) -> None:
        self.endpoint = endpoint
        self.device_id = device_id
        self.subscriber = subscriber

    def payloads(self) -> list[dict[str, Any]]:
        return [self.subscriber.decrypt(hit.body) for hit in self.endpoint.hits]


async def register(a: Actor, endpoint: Endpoint, name: str) -> Phone:
    subscriber = Subscriber()
    resp = await a.user.post("/v1/push/devices", json={
        "platform": "webpush", "endpoint": f"{endpoint.url}/wpush/{name}",
        "keys": subscriber.keys})
    assert resp.status_code == 201, resp.text
    return Phone(endpoint, int(resp.json()["id"]), subscriber)


async def ask(h: Harness, a: Actor, *questions: dict[str, Any]) -> tuple[str, str]:
    tid = await new_thread(a.user, title="Refactor")
    _, content = await post_card(a.agent, tid, *(questions or (CHOICE,)))
    await h.services.push.dispatcher.run_until_idle()
    return tid, content["components"][0]["id"]


async def snapshot(h: Harness, user_id: str) -> dict[str, Any]:
    """What an answer would change: messages, components, decisions, tokens, outbox."""
    out: dict[str, Any] = {}
    async with h.services.db.connection() as conn:
        for table in ("messages", "decisions", "push_action_tokens", "push_outbox"):
            rows = await conn.fetch(f"SELECT * FROM {table} WHERE user_id = $1 ORDER BY id",
                                    user_id)
            out[table] = [dict(r) for r in rows]
    return out


def act(h: Harness, body: dict[str, Any]) -> Any:
    return h.client.post("/v1/push/actions", json=body)


async def test_a_token_answers_without_a_bearer_token_once(push: Harness) -> None:
    a = await push.actor("max")
    async with Endpoint() as endpoint:
        phone = await register(a, endpoint, "phone")
        _, cid = await ask(push, a)
        [payload] = phone.payloads()
    token = payload["action_token"]
    resp = await act(push, {"action_token": token, "action": "opt:keep", "text": None})
    assert resp.status_code == 200, resp.text
    assert resp.json()["status"] == "settled" and resp.json()["settled_via"] == "push"
    component = (await a.user.get(f"/v1/components/{cid}")).json()
    assert component["answer"]["selected"] == ["keep"] and component["answered_via"] == "push"
    before = await snapshot(push, a.user_id)
    # the question's token, spent; and the confirmation's Take back (test_push_take_back.py)
    [row, take_back] = before["push_action_tokens"]
    assert row["used_at"] is not None and row["device_id"] == phone.device_id
    assert (row["scope"], take_back["scope"]) == ("answer", "retract")
    assert resp.json()["take_back"]["action_token"] != token

    replay = await act(push, {"action_token": token, "action": "opt:drop"})
    assert replay.status_code == 409
    assert replay.json()["code"] == "settled"
    assert replay.json()["data"]["reason"] == "action_token_used"
    assert await snapshot(push, a.user_id) == before  # nothing written


async def test_the_reply_box_answers_other_with_text(push: Harness) -> None:
    a = await push.actor("max")
    async with Endpoint() as endpoint:
        phone = await register(a, endpoint, "phone")
        _, cid = await ask(push, a)
        [payload] = phone.payloads()
    empty = await act(push, {"action_token": payload["action_token"], "action": "other",
                             "text": "  "})
    assert empty.status_code == 422  # the token is not spent on a refused answer
    resp = await act(push, {"action_token": payload["action_token"], "action": "other",
                            "text": "Keep it two versions"})
    assert resp.status_code == 200, resp.text
    component = (await a.user.get(f"/v1/components/{cid}")).json()
    assert component["answer"]["text"] == "Keep it two versions"


async def test_each_device_gets_its_own_token(push: Harness) -> None:
    a = await push.actor("max")
    async with Endpoint() as endpoint:
        phone = await register(a, endpoint, "phone")
        laptop = await register(a, endpoint, "laptop")
        await ask(push, a)
        hits = {hit.path: hit.body for hit in endpoint.hits}
    mine = phone.subscriber.decrypt(hits["/wpush/phone"])["action_token"]
    theirs = laptop.subscriber.decrypt(hits["/wpush/laptop"])["action_token"]
    assert mine != theirs
    async with push.services.db.connection() as conn:
        devices = {r["device_id"] for r in await conn.fetch(
            "SELECT device_id FROM push_action_tokens WHERE user_id = $1", a.user_id)}
    assert devices == {phone.device_id, laptop.device_id}
    # a removed device's token no longer answers
    assert (await a.user.delete(f"/v1/push/devices/{phone.device_id}")).status_code == 204
    before = await snapshot(push, a.user_id)
    resp = await act(push, {"action_token": mine, "action": "opt:keep"})
    assert resp.status_code == 401 and resp.json()["data"]["reason"] == "action_token_unknown"
    assert await snapshot(push, a.user_id) == before
    ok = await act(push, {"action_token": theirs, "action": "opt:keep"})
    assert ok.status_code == 200, ok.text


async def test_refusals_write_nothing(push: Harness) -> None:
    a = await push.actor("max")
    async with Endpoint() as endpoint:
        phone = await register(a, endpoint, "phone")
        _, first = await ask(push, a)
        _, second = await ask(push, a)
        one, two = phone.payloads()
    before = await snapshot(push, a.user_id)

    other = await act(push, {"action_token": one["action_token"], "action": "opt:keep",
                             "decision_id": two["decision_id"]})
    assert other.status_code == 401
    assert other.json()["data"]["reason"] == "action_token_other_decision"
    for garbage in ("mcpa_not-a-token", "Bearer something", "x" * 150):
        resp = await act(push, {"action_token": garbage, "action": "opt:keep"})
        assert resp.status_code == 401, resp.text
        assert resp.json()["code"] == "unauthorized"
        assert resp.json()["data"]["reason"] == "action_token_unknown"
    bad_action = await act(push, {"action_token": one["action_token"], "action": "nope"})
    assert bad_action.status_code == 422
    # an expired token
    async with push.services.db.connection() as conn:
        await conn.execute("UPDATE push_action_tokens SET expires_at = now() - interval '1 s' "
                           "WHERE decision_id = $1", two["decision_id"])
    before = await snapshot(push, a.user_id)
    expired = await act(push, {"action_token": two["action_token"], "action": "opt:keep"})
    assert expired.status_code == 401
    assert expired.json()["data"]["reason"] == "action_token_expired"
    assert await snapshot(push, a.user_id) == before
    assert (await a.user.get(f"/v1/components/{first}")).json()["status"] == "open"
    assert (await a.user.get(f"/v1/components/{second}")).json()["status"] == "open"


async def test_after_the_card_was_answered_elsewhere(push: Harness) -> None:
    a = await push.actor("max")
    async with Endpoint() as endpoint:
        phone = await register(a, endpoint, "phone")
        _, cid = await ask(push, a)
        [payload] = phone.payloads()
    answered = await a.user.post(f"/v1/components/{cid}/answer", json={"selected": ["drop"]})
    assert answered.status_code == 200
    before = await snapshot(push, a.user_id)
    resp = await act(push, {"action_token": payload["action_token"], "action": "opt:keep"})
    assert resp.status_code == 409
    assert resp.json()["code"] == "settled"
    assert resp.json()["data"]["reason"] == "decision_settled"
    assert await snapshot(push, a.user_id) == before
    component = (await a.user.get(f"/v1/components/{cid}")).json()
    assert component["answer"]["selected"] == ["drop"] and component["answered_via"] == "card"


async def test_a_reopened_question_refuses_the_old_notifications_token(push: Harness) -> None:
    a = await push.actor("max")
    async with Endpoint() as endpoint:
        phone = await register(a, endpoint, "phone")
        _, cid = await ask(push, a)
        assert (await a.user.post(f"/v1/components/{cid}/to-main")).status_code == 200
        resp = await main_tool(a, "answer_for_max", {"component_id": cid, "selected": ["drop"],
                                                     "reason": "nobody uses it"})
        assert resp.status_code == 200
        assert (await a.user.post(f"/v1/components/{cid}/revoke")).status_code == 200
        await push.services.push.dispatcher.run_until_idle()
        payloads = phone.payloads()
    old, new = [p for p in payloads if p["kind"] == "agent-question"]
    assert old["action_token"] != new["action_token"]
    before = await snapshot(push, a.user_id)
    stale = await act(push, {"action_token": old["action_token"], "action": "opt:keep"})
    assert stale.status_code == 401 and stale.json()["data"]["reason"] == "action_token_stale"
    assert await snapshot(push, a.user_id) == before
    ok = await act(push, {"action_token": new["action_token"], "action": "opt:keep"})
    assert ok.status_code == 200, ok.text


async def test_racing_uses_of_one_token_answer_once(push: Harness) -> None:
    a = await push.actor("max")
    async with Endpoint() as endpoint:
        phone = await register(a, endpoint, "phone")
        _, cid = await ask(push, a)
        [payload] = phone.payloads()
    body = {"action_token": payload["action_token"], "action": "opt:keep"}
    results = await asyncio.gather(*(act(push, body) for _ in range(8)))
    assert sorted(r.status_code for r in results) == [200] + [409] * 7
    tid = (await a.user.get(f"/v1/components/{cid}")).json()["thread_id"]
    messages = (await a.user.get(f"/v1/threads/{tid}/messages")).json()["messages"]
    answers = [m for m in messages if (m.get("source_meta") or {}).get("componentAnswer")]
    assert len(answers) == 1


async def test_a_secret_question_carries_no_token(push: Harness) -> None:
    a = await push.actor("max")
    async with Endpoint() as endpoint:
        phone = await register(a, endpoint, "phone")
        await ask(push, a, SECRET)
        [payload] = phone.payloads()
    assert payload["secret"] is True and "action_token" not in payload
    assert payload["actions"] == []
    async with push.services.db.connection() as conn:
        assert await conn.fetchval("SELECT count(*) FROM push_action_tokens") == 0
    assert "Paste" in json.dumps(payload)  # the question, never an answer field
    assert "answer" not in payload


async def test_the_bearer_form_still_works(push: Harness) -> None:
    a = await push.actor("max")
    async with Endpoint() as endpoint:
        await register(a, endpoint, "phone")
        await ask(push, a)
    [decision] = (await a.user.get("/v1/decisions")).json()["decisions"]
    missing = await act(push, {"decision_id": decision["id"], "action": "opt:keep"})
    assert missing.status_code == 401  # no token of either kind
    resp = await a.user.post("/v1/push/actions", json={"decision_id": decision["id"],
                                                       "action": "opt:keep"})
    assert resp.status_code == 200, resp.text
    agent = await a.agent.post("/v1/push/actions", json={"decision_id": decision["id"],
                                                         "action": "opt:keep"})
    assert agent.status_code == 403
