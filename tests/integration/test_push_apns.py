"""APNs through aioapns, over a real TLS + HTTP/2 connection to a local fake of Apple's
server (TLS checks Apple's host name; only the TCP address is local): headers, JWT, bodies, Live
Activity events, and how APNs errors end a row."""

from __future__ import annotations

import asyncio
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
from tests.cards import CHOICE, SECRET, TEXT, new_thread, post_card
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
    await register(a, TOKEN)
    tid = await new_thread(a.user, title="Refactor")
    call_id, _ = await post_card(a.agent, tid, CHOICE)
    cid = f"{call_id}:q1"
    before = int(time.time())
    assert await dispatcher.run_until_idle() == 1
    [row] = await outbox(harness)
    assert row["status"] == "sent", row["last_error"]
    assert fake.server_names == ["api.development.push.apple.com"]  # the sandbox host
    [alert] = fake.requests

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
        {"id": "opt:keep", "title": "Keep one version", "recommended": True},
        {"id": "opt:drop", "title": "Remove it now"},
        {"id": "other", "title": "Other…", "input": True}]
    assert body["maxclaw"]["decision_id"] == row["decision_id"]

    resp = await a.user.post("/v1/push/actions", json={"decision_id": row["decision_id"],
                                                       "action": "opt:keep"})
    assert resp.status_code == 200, resp.text
    assert await dispatcher.run_until_idle() == 1
    [withdraw] = fake.requests[1:]
    assert withdraw.headers["apns-push-type"] == "background"
    assert withdraw.headers["apns-priority"] == "5"
    assert withdraw.headers["apns-collapse-id"] == f"ask:{cid}"
    assert json.loads(withdraw.body)["aps"] == {"content-available": 1}
    assert json.loads(withdraw.body)["maxclaw"]["kind"] == "withdraw"
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
    Apple's reason, the device stays, and the dead token is forgotten, so the next question
    starts a new activity with the push-to-start token."""
    fake, dispatcher = apns
    a = await harness.actor("max")
    await post_card(a.agent, await new_thread(a.user), CHOICE)
    device = await register(a, TOKEN, live_activity_token=GONE, live_activity_start_token=START)
    assert await dispatcher.run_until_idle() == 1  # its first update is queued at registration
    [row] = await outbox(harness)
    assert row["kind"] == "activity"
    assert (row["status"], row["last_error"]) == ("dead", "APNs answered 410: Unregistered")
    assert len((await a.user.get("/v1/push/devices")).json()["devices"]) == 1
    assert len(fake.requests) == 1
    config = await device_config(harness, device)
    assert "live_activity_token" not in config and config["live_activity_start_token"] == START
    await post_card(a.agent, await new_thread(a.user), TEXT)
    assert await dispatcher.run_until_idle() == 2
    [start] = [r for r in fake.requests[1:] if r.headers["apns-push-type"] == "liveactivity"]
    assert activity_of(start, "start", token=START)["content-state"]["open_count"] == 2


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


# -- the Live Activity: one activity listing every open question --------------------------

START = "5747" * 20
# Apple's keys of a Live Activity push's ``aps`` per event ("Starting and updating Live
# Activities with ActivityKit push notifications"): allowed, and required
APPLE_ALLOWED = {
    "start": {"timestamp", "event", "content-state", "attributes-type", "attributes", "alert",
              "stale-date", "relevance-score", "dismissal-date", "input-push-token"},
    "update": {"timestamp", "event", "content-state", "stale-date", "alert", "relevance-score",
               "dismissal-date"},
    "end": {"timestamp", "event", "content-state", "stale-date", "dismissal-date"},
}
APPLE_REQUIRED = {
    "start": {"timestamp", "event", "content-state", "attributes-type", "attributes"},
    "update": {"timestamp", "event", "content-state"},
    "end": {"timestamp", "event"},
}


def activity_of(request: Any, event: str, token: str = ACTIVITY) -> dict[str, Any]:
    """A recorded Live Activity request's ``aps``, checked against Apple's documented
    headers and keys for ``event``."""
    headers = request.headers
    assert headers[":path"] == f"/3/device/{token}"
    assert headers["apns-push-type"] == "liveactivity"
    assert headers["apns-topic"] == f"{TOPIC}.push-type.liveactivity"
    assert headers["apns-priority"] == ("5" if event == "end" else "10")
    assert "apns-collapse-id" not in headers
    assert len(request.body) <= 4096
    body = json.loads(request.body)
    assert set(body) == {"aps"}
    aps: dict[str, Any] = body["aps"]
    assert APPLE_REQUIRED[event] <= set(aps) <= APPLE_ALLOWED[event], set(aps)
    assert aps["event"] == event
    assert isinstance(aps["timestamp"], int) and abs(aps["timestamp"] - time.time()) < 120
    return aps


def shown(aps: dict[str, Any]) -> list[str]:
    return [c["component_id"] for c in aps["content-state"]["cards"]]


async def device_config(h: Harness, device_id: int) -> dict[str, Any]:
    async with h.services.db.connection() as conn:
        config: dict[str, Any] = await conn.fetchval(
            "SELECT config FROM push_devices WHERE id = $1", device_id)
    return config


async def test_settling_one_of_three_updates_the_activity_and_the_last_ends_it(
        harness: Harness, apns: tuple[ApnsFake, Dispatcher]) -> None:
    fake, dispatcher = apns
    a = await harness.actor("max")
    cids = []
    for question in (CHOICE, TEXT, SECRET):
        call_id, _ = await post_card(a.agent, await new_thread(a.user), question)
        cids.append(f"{call_id}:{question['id']}")
    device = await register(a, TOKEN, live_activity_token=ACTIVITY)  # the app's activity
    assert await dispatcher.run_until_idle() == 1
    first = activity_of(fake.requests[-1], "update")
    assert first["content-state"]["open_count"] == 3
    assert shown(first) == cids[::-1]  # newest first
    assert [c["question"] for c in first["content-state"]["cards"]] == [
        SECRET["question"], TEXT["question"], CHOICE["question"]]

    resp = await a.user.post(f"/v1/components/{cids[0]}/answer", json={"selected": ["keep"]})
    assert resp.status_code == 200, resp.text
    assert await dispatcher.run_until_idle() == 1
    second = activity_of(fake.requests[-1], "update")  # updated, not ended
    assert (second["content-state"]["open_count"], shown(second)) == (2, cids[:0:-1])
    assert second["timestamp"] >= first["timestamp"]

    resp = await a.user.post(f"/v1/components/{cids[2]}/answer", json={"text": "s3cr3t-v4lue"})
    assert resp.status_code == 200, resp.text
    assert await dispatcher.run_until_idle() == 1
    third = activity_of(fake.requests[-1], "update")
    assert (third["content-state"]["open_count"], shown(third)) == (1, [cids[1]])

    resp = await a.user.post(f"/v1/components/{cids[1]}/answer", json={"text": "none"})
    assert resp.status_code == 200, resp.text
    assert await dispatcher.run_until_idle() == 1
    last = activity_of(fake.requests[-1], "end")
    assert last["content-state"] == {"open_count": 0, "cards": []}
    assert last["dismissal-date"] == last["timestamp"]
    assert len(fake.requests) == 4
    assert all(b"s3cr3t-v4lue" not in r.body for r in fake.requests)
    # an ended activity takes no more pushes: its token is forgotten, and a new question
    # (with no push-to-start token) gets its notification only
    assert "live_activity_token" not in await device_config(harness, device)
    await post_card(a.agent, await new_thread(a.user), CHOICE)
    assert [r["kind"] for r in await outbox(harness)][-1] == "notify"
    assert await dispatcher.run_until_idle() == 1
    assert fake.requests[-1].headers["apns-push-type"] == "alert"


async def test_a_push_to_start_token_starts_the_activity_once(
        harness: Harness, apns: tuple[ApnsFake, Dispatcher]) -> None:
    fake, dispatcher = apns
    a = await harness.actor("max")
    device = await register(a, TOKEN, live_activity_start_token=START)
    assert await outbox(harness) == []  # nothing open: nothing to start
    call_id, _ = await post_card(a.agent, await new_thread(a.user), CHOICE)
    assert await dispatcher.run_until_idle() == 2
    [start] = [r for r in fake.requests if r.headers["apns-push-type"] == "liveactivity"]
    aps = activity_of(start, "start", token=START)
    assert aps["attributes-type"] == "MaxClawQuestionsAttributes"
    assert aps["attributes"] == {"app": "MaxClaw"}
    assert aps["alert"]["body"] == "1 open question"
    assert shown(aps) == [f"{call_id}:q1"]

    # a second question before the app reported the started activity's token: no second
    # activity, only the question's notification
    second, _ = await post_card(a.agent, await new_thread(a.user), TEXT)
    assert await dispatcher.run_until_idle() == 1
    assert fake.requests[-1].headers["apns-push-type"] == "alert"
    # the app reports the activity's token: it gets the whole state at once
    assert await register(a, TOKEN, live_activity_start_token=START,
                          live_activity_token=ACTIVITY) == device
    assert await dispatcher.run_until_idle() == 1
    update = activity_of(fake.requests[-1], "update")
    assert shown(update) == [f"{second}:q2", f"{call_id}:q1"]


async def test_two_settled_at_once_leave_the_one_still_open(
        harness: Harness, apns: tuple[ApnsFake, Dispatcher]) -> None:
    """Two answers racing: the second computes its state after the first committed (a lock
    per user), so neither leaves the other's settled card on show."""
    fake, dispatcher = apns
    a = await harness.actor("max")
    cids = []
    for question in (CHOICE, CHOICE, CHOICE):
        call_id, _ = await post_card(a.agent, await new_thread(a.user), question)
        cids.append(f"{call_id}:q1")
    await register(a, TOKEN, live_activity_token=ACTIVITY)
    assert await dispatcher.run_until_idle() == 1
    answers = await asyncio.gather(*[
        a.user.post(f"/v1/components/{cid}/answer", json={"selected": ["drop"]})
        for cid in cids[:2]])
    assert [r.status_code for r in answers] == [200, 200]
    rows = [r for r in await outbox(harness) if r["kind"] == "activity"]
    assert [r["payload"]["open_count"] for r in rows][-1] == 1
    await dispatcher.run_until_idle()
    last = activity_of(fake.requests[-1], "update")
    assert shown(last) == [cids[2]]


async def test_the_second_of_two_interleaved_settles_waits_for_the_first(
        harness: Harness, apns: tuple[ApnsFake, Dispatcher]) -> None:
    """Forced interleaving: the second transaction's state is computed after the first one
    committed. Without the per-user lock it would still count the first one's decision as
    open (each saw the other's as open), and the activity would show a settled question."""
    _, dispatcher = apns
    a = await harness.actor("max")
    for _ in range(3):
        await post_card(a.agent, await new_thread(a.user), CHOICE)
    await register(a, TOKEN, live_activity_token=ACTIVITY)
    assert await dispatcher.run_until_idle() == 1
    async with harness.services.db.connection() as conn:
        ids = [r["id"] for r in await conn.fetch(
            "SELECT id FROM decisions WHERE user_id = $1 AND status = 'open' ORDER BY id",
            a.user_id)]
    settle = "UPDATE decisions SET status = 'settled' WHERE user_id = $1 AND id = $2"
    async with harness.services.db.transaction() as first:
        await first.execute(settle, a.user_id, ids[0])
        second = asyncio.create_task(_settle_alone(harness, settle, a.user_id, ids[1]))
        await asyncio.sleep(0.5)  # the second is now waiting for the first's lock
        assert not second.done()
    await asyncio.wait_for(second, 10)
    rows = [r for r in await outbox(harness) if r["kind"] == "activity"]
    assert rows[-1]["payload"]["open_count"] == 1
    assert [c["decision_id"] for c in rows[-1]["payload"]["cards"]] == [ids[2]]


async def _settle_alone(h: Harness, sql: str, user_id: str, decision_id: int) -> None:
    async with h.services.db.transaction() as conn:
        await conn.execute(sql, user_id, decision_id)


async def test_one_statement_settling_several_users_refreshes_each_his_own(
        harness: Harness, apns: tuple[ApnsFake, Dispatcher]) -> None:
    """A sweep settles many users' decisions in one statement, and the trigger hands the
    refresh every user at once: each device gets its own user's state (the refresh runs one
    user at a time, 0026_live_activity_per_user), and a user with no Live Activity nothing."""
    _, dispatcher = apns
    actors = [await harness.actor(name) for name in ("max", "ann", "bo")]
    open_ids: dict[str, list[int]] = {}
    for n, actor in enumerate(actors):
        for _ in range(n + 2):  # 2, 3 and 4 open questions
            await post_card(actor.agent, await new_thread(actor.user), CHOICE)
        if actor.name != "bo":  # bo has no device: his decisions settle with no refresh
            await register(actor, f"{n:02d}" * 32, live_activity_token=f"{n:02d}" * 36)
    assert await dispatcher.run_until_idle() == 2
    async with harness.services.db.connection() as conn:
        for actor in actors:
            open_ids[actor.name] = [r["id"] for r in await conn.fetch(
                "SELECT id FROM decisions WHERE user_id = $1 AND status = 'open' ORDER BY id",
                actor.user_id)]
    before = len(await outbox(harness))
    # each user's oldest decision settles, all three in one statement
    async with harness.services.db.transaction() as conn:
        await conn.execute(
            "UPDATE decisions SET status = 'settled'"
            " WHERE (user_id, id) IN (SELECT * FROM unnest($1::uuid[], $2::bigint[]))",
            [a.user_id for a in actors], [open_ids[a.name][0] for a in actors])
    queued = (await outbox(harness))[before:]
    by_user = {str(r["user_id"]): r["payload"] for r in queued}
    assert len(queued) == 2 and set(by_user) == {actors[0].user_id, actors[1].user_id}
    for actor in actors[:2]:
        payload = by_user[actor.user_id]
        assert payload["event"] == "update"
        assert payload["open_count"] == len(open_ids[actor.name]) - 1
        assert [c["decision_id"] for c in payload["cards"]] == open_ids[actor.name][:0:-1]
