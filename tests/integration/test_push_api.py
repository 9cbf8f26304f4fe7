"""Push over the API: devices (register, refresh, forget, address rules) and actions taken on
a notification, through the real card → decision path; a secret answered from the reply box
reaches only its message."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from maxclaw.logs import JsonFormatter
from maxclaw.push.payload import build_payload
from tests.cards import CHOICE, OBJECT, SECRET, new_thread, post_card
from tests.conftest import Actor, Harness

HOOK_SECRET = "0123456789abcdef-secret"
P256DH = ("BNcRdreALRFXTkOOUHK1EtK2wtaz5Ry4YfYCA_0QTpQtUbVlUls0VJXg7A8u-Ts1XbjhazAkj7I99e8QcYP7DkM")
AUTH = "tBHItJI5svbpez7KI4CCXg"
TOKEN = "ab" * 32


@pytest.fixture
async def max_(harness: Harness) -> AsyncIterator[Actor]:
    yield await harness.actor("max")
    await harness.services.push.dispatcher.close()


def assert_error(resp: Any, status: int, code: str) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    body: dict[str, Any] = resp.json()
    assert body["code"] == code
    assert body["message"]
    return body


async def register(actor: Actor, **device: Any) -> Any:
    return await actor.user.post("/v1/push/devices", json=device)


async def rows(h: Harness, sql: str, *args: Any) -> list[dict[str, Any]]:
    async with h.services.db.connection() as conn:
        return [dict(r) for r in await conn.fetch(sql, *args)]


async def test_register_refresh_list_and_delete_devices(harness: Harness, max_: Actor) -> None:
    hook = await register(max_, platform="webhook", url="https://93.184.216.34/hook",
                          secret=HOOK_SECRET)
    assert hook.status_code == 201
    assert hook.json() == {"id": hook.json()["id"],
                                                       "platform": "webhook"}
    web = await register(max_, platform="webpush", endpoint="https://93.184.216.34/push/1",
                         keys={"p256dh": P256DH, "auth": AUTH})
    apns = await register(max_, platform="apns", token=TOKEN, topic="com.example.maxclaw",
                          environment="sandbox")
    log_device = await register(max_, platform="log")
    assert [r.status_code for r in (web, apns, log_device)] == [201, 201, 201]
    again = await register(max_, platform="webhook", url="https://93.184.216.34/hook",
                           secret=HOOK_SECRET + "-rotated")
    assert again.status_code == 201
    assert again.json()["id"] == hook.json()["id"]
    [stored] = await rows(harness, "SELECT secret FROM push_devices WHERE id = $1",
                          hook.json()["id"])
    assert stored["secret"] == HOOK_SECRET + "-rotated"
    listed = await max_.user.get("/v1/push/devices")
    assert listed.status_code == 200
    assert [d["platform"] for d in listed.json()["devices"]] == [
        "webhook", "webpush", "apns", "log"]
    assert HOOK_SECRET not in listed.text
    assert AUTH not in listed.text
    assert TOKEN not in listed.text

    eve = await harness.actor("eve")
    path = f"/v1/push/devices/{hook.json()['id']}"
    assert_error(await eve.user.delete(path), 404, "not_found")
    assert (await max_.user.delete(path)).status_code == 204
    assert_error(await max_.user.delete(path), 404, "not_found")
    assert_error(await max_.user.delete("/v1/push/devices/not-a-number"), 404, "not_found")
    assert_error(await max_.agent.get("/v1/push/devices"), 403, "forbidden")
    config = await max_.user.get("/v1/push/config")
    assert config.json() == {"vapid_public_key": None}  # no VAPID key configured
    assert len(await rows(harness, "SELECT id FROM push_devices")) == 3


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:8080/hook", "https://localhost/hook", "https://10.0.0.7/hook",
    "https://192.168.1.2/hook", "https://[::1]/hook", "https://169.254.169.254/latest",
    "ftp://93.184.216.34/hook", "not a url"])
async def test_webhook_on_a_private_or_bad_address_is_invalid(max_: Actor, url: str) -> None:
    body = assert_error(await register(max_, platform="webhook", url=url, secret=HOOK_SECRET),
                        422, "invalid")
    assert body["data"]["errors"][0]["loc"][-1] == "url"


async def test_device_validation(max_: Actor) -> None:
    keys = {"p256dh": P256DH, "auth": AUTH}
    cases: list[dict[str, Any]] = [
        {"platform": "webpush", "endpoint": "http://93.184.216.34/push", "keys": keys},
        {"platform": "webpush", "endpoint": "https://127.0.0.1/push", "keys": keys},
        {"platform": "webpush", "endpoint": "https://93.184.216.34/p",
         "keys": {"p256dh": "AAAA", "auth": AUTH}},
        {"platform": "webpush", "endpoint": "https://93.184.216.34/p", "keys": {"auth": AUTH}},
        {"platform": "apns", "token": "not-hex", "topic": "com.example.app"},
        {"platform": "apns", "token": TOKEN, "topic": "com.example.app", "environment": "beta"},
        {"platform": "webhook", "url": "https://93.184.216.34/h", "secret": "short"},
        {"platform": "fax", "number": "123"},
    ]
    for case in cases:
        assert_error(await register(max_, **case), 422, "invalid")


async def test_private_addresses_are_allowed_when_the_operator_says_so(
        harness: Harness, max_: Actor) -> None:
    harness.services.settings.push_allow_private_urls = True
    resp = await register(max_, platform="webhook", url="http://127.0.0.1:9/hook",
                          secret=HOOK_SECRET)
    assert resp.status_code == 201, resp.text


async def decision_for(actor: Actor, component_id: str) -> dict[str, Any]:
    resp = await actor.user.get("/v1/decisions?status=all")
    return next(d for d in resp.json()["decisions"] if d["component_id"] == component_id)


async def test_a_push_button_answers_the_card_once(harness: Harness, max_: Actor) -> None:
    await register(max_, platform="log")
    await register(max_, platform="webhook", url="https://93.184.216.34/hook", secret=HOOK_SECRET)
    tid = await new_thread(max_.user, title="Refactor")
    call_id, _ = await post_card(max_.agent, tid, CHOICE)
    cid = f"{call_id}:q1"
    decision = await decision_for(max_, cid)
    queued = await rows(harness, "SELECT * FROM push_outbox ORDER BY id")
    assert [r["kind"] for r in queued] == ["notify", "notify"]
    assert all(r["payload"] == build_payload(decision, "Refactor") for r in queued)
    # a button on a notification implies it was shown: as if both had been delivered
    await rows(harness, "UPDATE push_outbox SET status = 'sent', attempts = 1 RETURNING id")

    resp = await max_.user.post("/v1/push/actions", json={
        "decision_id": decision["id"], "action": "opt:keep", "text": None})
    assert resp.status_code == 200, resp.text
    assert resp.json()["status"] == "settled"
    assert resp.json()["settled_via"] == "push"
    component = (await max_.user.get(f"/v1/components/{cid}")).json()
    assert component["status"] == "answered"
    assert component["answered_via"] == "push"
    assert component["answer"]["selected"] == ["keep"]
    withdraws = await rows(harness, "SELECT * FROM push_outbox WHERE kind = 'withdraw'")
    assert len(withdraws) == 2
    assert all(w["payload"] == {"v": 1, "kind": "withdraw", "collapse_id": f"ask:{cid}"}
               for w in withdraws)
    # each shown notification gets its withdraw (one never sent would get none)
    notified = await rows(harness, "SELECT status FROM push_outbox WHERE kind = 'notify'")
    assert {r["status"] for r in notified} == {"sent"}

    assert_error(await max_.user.post("/v1/push/actions", json={
        "decision_id": decision["id"], "action": "opt:drop"}), 409, "settled")
    msgs = (await max_.user.get(f"/v1/threads/{tid}/messages")).json()["messages"]
    answers = [m for m in msgs if (m["source_meta"] or {}).get("componentAnswer")]
    assert len(answers) == 1
    assert answers[0]["source_meta"]["componentAnswer"]["via"] == "push"
    assert len(await rows(harness, "SELECT id FROM push_outbox WHERE kind = 'withdraw'")) == 2


async def test_other_with_text_and_object_buttons(harness: Harness, max_: Actor) -> None:
    tid = await new_thread(max_.user)
    call_id, _ = await post_card(max_.agent, tid, CHOICE, OBJECT)
    choice = await decision_for(max_, f"{call_id}:q1")
    obj = await decision_for(max_, f"{call_id}:q4")
    resp = await max_.user.post("/v1/push/actions", json={
        "decision_id": choice["id"], "action": "other", "text": "Keep it two versions"})
    assert resp.status_code == 200, resp.text
    component = (await max_.user.get(f"/v1/components/{call_id}:q1")).json()
    assert component["answer"] == {"selected": [], "text": "Keep it two versions"}
    resp = await max_.user.post("/v1/push/actions", json={
        "decision_id": obj["id"], "action": "opt:apply"})
    assert resp.status_code == 200, resp.text
    component = (await max_.user.get(f"/v1/components/{call_id}:q4")).json()
    assert component["answer"]["selected"] == ["apply"]
    assert component["answered_via"] == "push"


async def test_bad_push_actions(harness: Harness, max_: Actor) -> None:
    tid = await new_thread(max_.user)
    call_id, _ = await post_card(max_.agent, tid, CHOICE)
    decision = await decision_for(max_, f"{call_id}:q1")
    for body in ({"action": "keep"}, {"action": "opt:"}, {"action": "other"},
                 {"action": "other", "text": "   "}, {"action": "opt:nope"}):
        assert_error(await max_.user.post("/v1/push/actions",
                                          json={"decision_id": decision["id"], **body}),
                     422, "invalid")
    eve = await harness.actor("eve")
    assert_error(await eve.user.post("/v1/push/actions", json={
        "decision_id": decision["id"], "action": "opt:keep"}), 404, "not_found")
    assert_error(await max_.user.post("/v1/push/actions", json={
        "decision_id": 999999, "action": "opt:keep"}), 404, "not_found")
    component = (await max_.user.get(f"/v1/components/{call_id}:q1")).json()
    assert component["status"] == "open"


async def test_a_secret_from_the_push_reply_box_reaches_only_its_message(
        harness: Harness, max_: Actor, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    planted = "tok_live_PUSH_9f8e7d6c5b4a"
    await register(max_, platform="log")
    tid = await new_thread(max_.user)
    call_id, _ = await post_card(max_.agent, tid, SECRET)
    decision = await decision_for(max_, f"{call_id}:q3")
    dispatcher = harness.services.push.dispatcher
    assert await dispatcher.run_until_idle() == 1
    resp = await max_.user.post("/v1/push/actions", json={
        "decision_id": decision["id"], "action": "other", "text": planted})
    assert resp.status_code == 200, resp.text
    assert planted not in resp.text
    assert await dispatcher.run_until_idle() == 1  # the withdraw

    logged = [r for r in caplog.records if r.name == "maxclaw.push.log"]
    assert [r.payload["kind"] for r in logged] == ["agent-question", "withdraw"]  # type: ignore[attr-defined]
    assert logged[0].payload["reply"] == {"placeholder": "Input (not echoed)…"}  # type: ignore[attr-defined]
    formatter = JsonFormatter()
    output = "\n".join(formatter.format(r) for r in caplog.records)
    assert '"payload"' in output
    assert planted not in output

    outbox = await rows(harness, "SELECT payload::text AS p, last_error FROM push_outbox")
    assert outbox
    assert all(planted not in r["p"] for r in outbox)
    decisions = await rows(harness, "SELECT to_jsonb(d)::text AS t FROM decisions d")
    assert all(planted not in d["t"] for d in decisions)
    holders = await rows(harness, "SELECT id, role, sensitive FROM messages WHERE "
                                  "to_jsonb(messages)::text LIKE '%' || $1 || '%'", planted)
    assert holders == []  # sealed in message_secrets; the answer row holds a masked copy
    sealed = await rows(harness, "SELECT m.role, m.sensitive FROM message_secrets s"
                                 " JOIN messages m ON m.id = s.message_id")
    assert [(h["role"], h["sensitive"]) for h in sealed] == [("user", True)]
    timeline = await max_.user.get(f"/v1/threads/{tid}/messages")
    assert timeline.status_code == 200
    assert planted not in timeline.text
