"""Deliveries over real HTTP to local endpoints: Web Push decrypted with the subscription's
key, signed webhooks, an endpoint that recovers, one that never does, and the LISTEN hint."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
from collections.abc import AsyncIterator
from typing import Any

import http_ece
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from py_vapid import Vapid

from maxclaw.app import create_app
from maxclaw.push.adapters.webpush import vapid_public_key
from maxclaw.settings import Settings
from tests.cards import CHOICE, SECRET, TEXT, new_thread, post_card
from tests.conftest import Harness
from tests.integration.push_fakes import Endpoint

SECRET_KEY = "whsec_0123456789abcdef"


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def new_vapid_pem() -> str:
    vapid = Vapid()
    vapid.generate_keys()
    return bytes(vapid.private_pem()).decode()


VAPID_PEM = new_vapid_pem()


@pytest.fixture
async def push(database_url: str) -> AsyncIterator[Harness]:
    """The app with private push targets allowed (the endpoints run on 127.0.0.1), small
    backoff, and a VAPID key."""
    settings = Settings(database_url=database_url, run_sweeper=False, run_listener=False,
                        run_push_dispatcher=False, log_json=True, db_pool_min=1, db_pool_max=10,
                        push_allow_private_urls=True, push_backoff_base_s=0.05,
                        push_backoff_max_s=0.2, push_max_attempts=3, vapid_private_key=VAPID_PEM,
                        vapid_subject="mailto:ops@maxclaw.example")
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        yield Harness(app=app, services=app.state.services, client=None)  # type: ignore[arg-type]
        await app.state.services.push.dispatcher.close()  # tests drive it without start/stop


class Subscriber:
    """A browser's side of Web Push: an ECDH P-256 key pair and an auth secret."""

    def __init__(self) -> None:
        self.private_key = ec.generate_private_key(ec.SECP256R1())
        self.auth = os.urandom(16)
        public = self.private_key.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
        self.keys = {"p256dh": b64url(public), "auth": b64url(self.auth)}

    def decrypt(self, body: bytes) -> Any:
        plain = http_ece.decrypt(body, private_key=self.private_key, auth_secret=self.auth,
                                 version="aes128gcm")
        return json.loads(plain)


async def decisions_of(user: Any) -> list[dict[str, Any]]:
    resp = await user.get("/v1/decisions?status=all")
    assert resp.status_code == 200, resp.text
    return list(resp.json()["decisions"])


async def outbox(h: Harness) -> list[dict[str, Any]]:
    async with h.services.db.connection() as conn:
        return [dict(r) for r in await conn.fetch("SELECT * FROM push_outbox ORDER BY id")]


async def test_web_push_decrypts_to_the_spec_payload(push: Harness) -> None:
    a = await push.actor("max")
    browser = Subscriber()
    async with Endpoint() as endpoint:
        endpoint_url = f"{endpoint.url}/wpush/v2/abc123"
        resp = await a.user.post("/v1/push/devices", json={
            "platform": "webpush", "endpoint": endpoint_url, "keys": browser.keys})
        assert resp.status_code == 201, resp.text
        assert resp.json()["platform"] == "webpush"
        tid = await new_thread(a.user, title="Refactor")
        call_id, _ = await post_card(a.agent, tid, CHOICE)
        [decision] = await decisions_of(a.user)
        assert await push.services.push.dispatcher.run_until_idle() == 1
    config = await a.user.get("/v1/push/config")
    assert config.json() == {"vapid_public_key": vapid_public_key(VAPID_PEM)}
    [hit] = endpoint.hits
    assert hit.path == "/wpush/v2/abc123"
    assert hit.headers["Content-Encoding"] == "aes128gcm"
    payload = browser.decrypt(hit.body)
    # the action token is minted for this device as the push is sent; only its hash is kept
    token = payload.pop("action_token")
    assert token.startswith("mcpa_") and len(token) > 40
    async with push.services.db.connection() as conn:
        [stored] = await conn.fetch("SELECT * FROM push_action_tokens")
        assert token not in json.dumps([dict(r) for r in await conn.fetch(
            "SELECT payload FROM push_outbox")])
    assert stored["token_hash"] == hashlib.sha256(token.encode()).digest()
    assert stored["decision_id"] == decision["id"] and stored["used_at"] is None
    assert payload == {
        "v": 1, "kind": "agent-question", "decision_id": decision["id"],
        "component_id": f"{call_id}:q1", "thread_id": tid, "title": "Refactor",
        "body": "Keep the old field for one version?",
        "actions": [{"id": "opt:keep", "title": "Keep one version", "recommended": True},
                    {"id": "opt:drop", "title": "Remove it now"},
                    {"id": "other", "title": "Other…", "input": True}],
        "reply": {"placeholder": "Reply…"}, "multiple": False, "collapse_id": f"ask:{call_id}:q1",
        "secret": False, "urgency": "normal",
        # shaped as it is sent (push/shaping.py): his locale, and outside quiet hours active
        "locale": "en", "labels": {"open": "Open", "other": "Other…", "reply": "Reply…"},
        "interruption_level": "active", "silent": False}
    [row] = await outbox(push)
    assert hit.headers["Idempotency-Key"] == str(row["id"])
    assert row["status"] == "sent"
    assert int(hit.headers["TTL"]) > 0
    assert hit.headers["Urgency"] == "high"
    assert len(hit.headers["Topic"]) == 32
    # VAPID (RFC 8292): "vapid t=<JWT>, k=<public key>", signed by our key, for this origin
    scheme, _, params = hit.headers["Authorization"].partition(" ")
    assert scheme == "vapid"
    fields = dict(p.split("=", 1) for p in params.replace(" ", "").split(","))
    assert fields["k"] == vapid_public_key(VAPID_PEM)
    public = ec.EllipticCurvePublicKey.from_encoded_point(
        ec.SECP256R1(), base64.urlsafe_b64decode(fields["k"] + "=="))
    claims = jwt.decode(fields["t"], public, algorithms=["ES256"], audience=endpoint.url)
    assert claims["sub"] == "mailto:ops@maxclaw.example"


async def test_webhook_deliveries_carry_a_valid_signature(push: Harness) -> None:
    a = await push.actor("max")
    async with Endpoint() as endpoint:
        resp = await a.user.post("/v1/push/devices", json={
            "platform": "webhook", "url": f"{endpoint.url}/hooks/maxclaw", "secret": SECRET_KEY})
        assert resp.status_code == 201, resp.text
        tid = await new_thread(a.user, title="Refactor")
        call_id, _ = await post_card(a.agent, tid, CHOICE, TEXT)
        assert await push.services.push.dispatcher.run_until_idle() == 2
    assert len(endpoint.hits) == 2
    rows = {str(r["id"]): r for r in await outbox(push)}
    for hit in endpoint.hits:
        expected = hmac.new(SECRET_KEY.encode(), hit.body, hashlib.sha256).hexdigest()
        assert hit.headers["X-MaxClaw-Signature"] == f"sha256={expected}"
        wrong = hmac.new(b"another secret", hit.body, hashlib.sha256).hexdigest()
        assert hit.headers["X-MaxClaw-Signature"] != f"sha256={wrong}"
        body = json.loads(hit.body)
        key = hit.headers["Idempotency-Key"]
        assert body.pop("delivery_id") == key
        # minted as it is sent, never stored in the outbox (issue 28 item 9)
        assert body.pop("action_token").startswith("mcpa_")
        assert "action_token" not in rows[key]["payload"]
        # the stored payload as shaped for him when sent (locale, interruption level)
        assert body == {**rows[key]["payload"], "locale": "en", "interruption_level": "active",
                        "silent": False, "labels": {"open": "Open", "other": "Other…",
                                                           "reply": "Reply…"}}
        assert hit.headers["Content-Type"] == "application/json"
    text_payload = next(json.loads(h.body) for h in endpoint.hits
                        if json.loads(h.body)["component_id"] == f"{call_id}:q2")
    assert text_payload["actions"] == []
    assert text_payload["reply"] == {"placeholder": "Reply…"}


async def test_an_endpoint_failing_for_a_while_gets_each_row_once(push: Harness) -> None:
    a = await push.actor("max")
    async with Endpoint(fail_first=5) as endpoint:
        for i in range(3):
            await a.user.post("/v1/push/devices", json={
                "platform": "webhook", "url": f"{endpoint.url}/h{i}", "secret": SECRET_KEY})
        tid = await new_thread(a.user)
        await post_card(a.agent, tid, CHOICE, TEXT)  # 2 decisions x 3 devices
        dispatcher = push.services.push.dispatcher
        await dispatcher.start()
        try:
            await endpoint.wait_delivered(6)
        finally:
            await dispatcher.stop()
    delivered = endpoint.delivered()
    assert len(delivered) == 6
    assert set(delivered.values()) == {1}
    assert len(endpoint.hits) == 6 + 5
    rows = await outbox(push)
    assert {r["status"] for r in rows} == {"sent"}
    assert sum(r["attempts"] for r in rows) == 11
    assert any(r["last_error"] == "webhook answered HTTP 500: try later" for r in rows)


async def test_an_endpoint_that_never_recovers_ends_dead_with_its_error(push: Harness) -> None:
    a = await push.actor("max")
    async with Endpoint(fail_forever=True, fail_status=503) as endpoint:
        await a.user.post("/v1/push/devices", json={
            "platform": "webhook", "url": f"{endpoint.url}/h", "secret": SECRET_KEY})
        tid = await new_thread(a.user)
        await post_card(a.agent, tid, CHOICE, TEXT)
        dispatcher = push.services.push.dispatcher
        await dispatcher.start()
        try:
            await endpoint.wait_hits(2 * 3)  # push_max_attempts=3 for each of 2 rows
        finally:
            await dispatcher.stop()  # finishes the pass in flight, so its outcome is recorded
    rows = await outbox(push)
    assert len(rows) == 2
    assert len(endpoint.hits) == 6
    for row in rows:
        assert (row["status"], row["attempts"]) == ("dead", 3)
        assert row["last_error"] == "webhook answered HTTP 503: try later"
    assert push.services.metrics.pushes.labels("webhook", "dead")._value.get() == 2


async def test_the_listen_hint_wakes_an_idle_dispatcher(push: Harness) -> None:
    a = await push.actor("max")
    async with Endpoint() as endpoint:
        await a.user.post("/v1/push/devices", json={
            "platform": "webhook", "url": f"{endpoint.url}/h", "secret": SECRET_KEY})
        dispatcher = push.services.push.dispatcher
        dispatcher.poll_s = 600.0  # only the hint can wake it within the wait below
        await dispatcher.start()
        try:
            await dispatcher.run_once()  # LISTEN is up once the loop made its first pass
            tid = await new_thread(a.user)
            await post_card(a.agent, tid, SECRET)
            await endpoint.wait_delivered(1, timeout_s=30)
        finally:
            await dispatcher.stop()
    body = json.loads(endpoint.hits[0].body)
    assert body["actions"] == []
    assert body["reply"] == {"placeholder": "Input (not echoed)…"}


async def test_a_private_address_is_refused_at_send_time_too(push: Harness) -> None:
    a = await push.actor("max")
    async with Endpoint() as endpoint:
        resp = await a.user.post("/v1/push/devices", json={
            "platform": "webhook", "url": f"{endpoint.url}/h", "secret": SECRET_KEY})
        assert resp.status_code == 201  # allowed when it was registered
        # then disallowed (the webhook adapter is wrapped: it stamps action tokens)
        push.services.push.adapters["webhook"].inner.http.allow_private = False
        tid = await new_thread(a.user)
        await post_card(a.agent, tid, CHOICE)
        assert await push.services.push.dispatcher.run_until_idle() == 1
    assert endpoint.hits == []
    [row] = await outbox(push)
    assert row["status"] == "dead"
    assert row["last_error"].startswith("refused: 127.0.0.1 is a loopback or private address")


@pytest.mark.parametrize(("platform", "status"), [("webpush", 410), ("webpush", 404),
                                                  ("webhook", 410)])
async def test_a_device_the_receiver_calls_gone_is_removed(push: Harness, platform: str,
                                                           status: int) -> None:
    """Web Push 404/410 (the subscription expired or was revoked) and a webhook's 410: the
    device is removed with its pushes, after one attempt, and never pushed to again; the
    user's other device is untouched."""
    a = await push.actor("max")
    async with Endpoint(fail_forever=True, fail_status=status) as gone, Endpoint() as alive:
        if platform == "webpush":
            body: dict[str, Any] = {"platform": "webpush", "endpoint": f"{gone.url}/wp/1",
                                    "keys": Subscriber().keys}
        else:
            body = {"platform": "webhook", "url": f"{gone.url}/h", "secret": SECRET_KEY}
        assert (await a.user.post("/v1/push/devices", json=body)).status_code == 201
        kept = await a.user.post("/v1/push/devices", json={
            "platform": "webhook", "url": f"{alive.url}/h", "secret": SECRET_KEY})
        dispatcher = push.services.push.dispatcher
        await post_card(a.agent, await new_thread(a.user), CHOICE)
        assert await dispatcher.run_until_idle() == 2
        assert len(gone.hits) == 1  # one attempt: no retries for a gone device
        devices = (await a.user.get("/v1/push/devices")).json()["devices"]
        assert [d["id"] for d in devices] == [kept.json()["id"]]
        assert [(r["device_id"], r["status"]) for r in await outbox(push)] == [
            (kept.json()["id"], "sent")]
        await post_card(a.agent, await new_thread(a.user), CHOICE)
        assert await dispatcher.run_until_idle() == 1
        assert len(gone.hits) == 1 and len(alive.hits) == 2
    assert push.services.metrics.pushes.labels(platform, "device_gone")._value.get() == 1
