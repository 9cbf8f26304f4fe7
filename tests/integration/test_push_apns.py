"""APNs through aioapns, over a real TLS + HTTP/2 connection to a local fake of Apple's
server (TLS checks Apple's host name; only the TCP address is local): headers, JWT, bodies, Live
Activity events, and how APNs errors end a row."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from maxclaw.push.adapters.apns import ApnsAdapter, apns_id
from maxclaw.push.dispatcher import Dispatcher
from tests.cards import CHOICE, new_thread, post_card
from tests.conftest import Actor, Harness
from tests.integration.push_fakes import ApnsFake, self_signed_tls

TOKEN = "0a1b" * 16
ACTIVITY = "c0ffee" * 12
GONE = "dead" * 16
KEY_ID = "ABC123DEFG"
TEAM_ID = "TEAM456XYZ"
TOPIC = "com.example.maxclaw"


@pytest.fixture
def signing_key(tmp_path: Path) -> tuple[Path, ec.EllipticCurvePublicKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    path = tmp_path / "AuthKey.p8"
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    return path, key.public_key()


@pytest.fixture
async def apns(harness: Harness, tmp_path: Path,
               signing_key: tuple[Path, Any]) -> AsyncIterator[tuple[ApnsFake, Dispatcher]]:
    server_tls, client_tls = self_signed_tls(tmp_path)
    async with ApnsFake(server_tls, answers={GONE: (410, "Unregistered")}) as fake:
        adapter = ApnsAdapter(key_path=signing_key[0], key_id=KEY_ID, team_id=TEAM_ID,
                              ssl_context=client_tls, connect_to=("127.0.0.1", fake.port))
        settings = harness.services.settings.model_copy(update={"push_max_attempts": 3})
        dispatcher = Dispatcher(harness.services.db, {"apns": adapter}, settings=settings,
                                metrics=harness.services.metrics, listen=False)
        yield fake, dispatcher
        await dispatcher.close()


async def register(actor: Actor, token: str, **extra: Any) -> int:
    resp = await actor.user.post("/v1/push/devices", json={
        "platform": "apns", "token": token, "topic": TOPIC, "environment": "sandbox", **extra})
    assert resp.status_code == 201, resp.text
    return int(resp.json()["id"])


async def outbox(h: Harness) -> list[dict[str, Any]]:
    async with h.services.db.connection() as conn:
        return [dict(r) for r in await conn.fetch("SELECT * FROM push_outbox ORDER BY id")]


async def test_aioapns_sends_apples_format_over_http2(
        harness: Harness, apns: tuple[ApnsFake, Dispatcher],
        signing_key: tuple[Path, ec.EllipticCurvePublicKey]) -> None:
    fake, dispatcher = apns
    a = await harness.actor("max")
    await register(a, TOKEN, live_activity_token=ACTIVITY)
    tid = await new_thread(a.user, title="Refactor")
    call_id, _ = await post_card(a.agent, tid, CHOICE)
    cid = f"{call_id}:q1"
    before = int(time.time())
    assert await dispatcher.run_until_idle() == 1
    [row] = await outbox(harness)
    assert row["status"] == "sent", row["last_error"]
    assert fake.server_names == ["api.development.push.apple.com"]  # the sandbox host
    alert, activity = fake.requests

    headers = alert.headers
    assert headers[":method"] == "POST"
    assert headers[":scheme"] == "https"
    assert headers[":path"] == f"/3/device/{TOKEN}"
    assert headers["host"] == "api.development.push.apple.com"
    assert headers["apns-topic"] == TOPIC
    assert headers["apns-push-type"] == "alert"
    assert headers["apns-priority"] == "10"
    assert headers["apns-collapse-id"] == f"ask:{cid}"
    assert headers["apns-id"] == apns_id(row["id"], "alert")
    assert str(uuid.UUID(headers["apns-id"])) == headers["apns-id"]
    assert 0 < int(headers["apns-expiration"]) - before <= 24 * 3600 + 5
    scheme, _, token = headers["authorization"].partition(" ")
    assert scheme == "bearer"
    assert jwt.get_unverified_header(token) == {"alg": "ES256", "kid": KEY_ID, "typ": "JWT"}
    claims = jwt.decode(token, signing_key[1], algorithms=["ES256"])
    assert claims["iss"] == TEAM_ID
    assert abs(claims["iat"] - before) < 60

    body = json.loads(alert.body)
    assert body["aps"]["alert"] == {"title": "Refactor",
                                    "body": "Keep the old field for one version?"}
    assert body["aps"]["category"] == "MAXCLAW_ASK_CHOICE"
    assert body["aps"]["mutable-content"] == 1
    assert body["maxclaw"]["actions"] == [
        {"id": "opt:keep", "title": "Keep one version"},
        {"id": "opt:drop", "title": "Remove it now"},
        {"id": "other", "title": "Other…", "input": True}]
    assert body["maxclaw"]["decision_id"] == row["decision_id"]

    assert activity.headers[":path"] == f"/3/device/{ACTIVITY}"
    assert activity.headers["apns-topic"] == f"{TOPIC}.push-type.liveactivity"
    assert activity.headers["apns-push-type"] == "liveactivity"
    update = json.loads(activity.body)["aps"]
    assert update["event"] == "update"
    assert update["content-state"]["status"] == "open"
    assert update["content-state"]["component_id"] == cid
    assert update["timestamp"] >= before

    resp = await a.user.post("/v1/push/actions", json={"decision_id": row["decision_id"],
                                                       "action": "opt:keep"})
    assert resp.status_code == 200, resp.text
    assert await dispatcher.run_until_idle() == 1
    withdraw, end = fake.requests[2:]
    assert withdraw.headers["apns-push-type"] == "background"
    assert withdraw.headers["apns-priority"] == "5"
    assert withdraw.headers["apns-collapse-id"] == f"ask:{cid}"
    assert json.loads(withdraw.body)["aps"] == {"content-available": 1}
    assert json.loads(withdraw.body)["maxclaw"]["kind"] == "withdraw"
    ended = json.loads(end.body)["aps"]
    assert ended["event"] == "end"
    assert ended["content-state"]["status"] == "settled"
    assert {r["status"] for r in await outbox(harness)} == {"sent"}


async def test_an_unregistered_token_removes_its_device(
        harness: Harness, apns: tuple[ApnsFake, Dispatcher]) -> None:
    """APNs' 410 Unregistered: the app is gone from that device. The device is removed (as
    its user's DELETE would), so later questions are not pushed to it again."""
    fake, dispatcher = apns
    a = await harness.actor("max")
    await register(a, GONE)
    kept = await register(a, TOKEN)
    tid = await new_thread(a.user)
    await post_card(a.agent, tid, CHOICE)
    assert await dispatcher.run_until_idle() == 2
    assert len(fake.requests) == 2
    devices = (await a.user.get("/v1/push/devices")).json()["devices"]
    assert [d["id"] for d in devices] == [kept]
    assert [r["status"] for r in await outbox(harness)] == ["sent"]  # the gone one's rows too
    assert harness.services.metrics.pushes.labels("apns", "device_gone")._value.get() == 1
    await post_card(a.agent, await new_thread(a.user), CHOICE)
    assert await dispatcher.run_until_idle() == 1
    assert fake.requests[-1].headers[":path"] == f"/3/device/{TOKEN}"


async def test_an_ended_live_activity_keeps_its_device(
        harness: Harness, apns: tuple[ApnsFake, Dispatcher]) -> None:
    """A 410 for the Live Activity token ends only that activity: the row is dead with
    Apple's reason, and the device stays."""
    fake, dispatcher = apns
    a = await harness.actor("max")
    await register(a, TOKEN, live_activity_token=GONE)
    await post_card(a.agent, await new_thread(a.user), CHOICE)
    assert await dispatcher.run_until_idle() == 1
    [row] = await outbox(harness)
    assert (row["status"], row["last_error"]) == ("dead", "APNs answered 410: Unregistered")
    assert len((await a.user.get("/v1/push/devices")).json()["devices"]) == 1
    assert len(fake.requests) == 2


async def test_unconfigured_apns_is_a_clear_dead_row(harness: Harness) -> None:
    a = await harness.actor("max")
    await register(a, TOKEN)
    tid = await new_thread(a.user)
    await post_card(a.agent, tid, CHOICE)
    dispatcher = harness.services.push.dispatcher  # production adapters: no APNs key set
    try:
        assert await dispatcher.run_until_idle() == 1
    finally:
        await dispatcher.close()
    [row] = await outbox(harness)
    assert row["status"] == "dead"
    assert "MAXCLAW_APNS_KEY_PATH" in row["last_error"]
