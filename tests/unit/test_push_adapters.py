"""Adapters' renderings, checked against each platform's documented format (no sockets)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import random
import re
import uuid
from typing import Any

import pytest

from maxclaw.push.adapters.apns import (
    CATEGORY_CHOICE,
    CATEGORY_REPLY,
    CATEGORY_SECRET,
    MAX_PAYLOAD,
    apns_collapse_id,
    check_result,
    render,
)
from maxclaw.push.adapters.base import Delivery, DeliveryError, check_http_status
from maxclaw.push.adapters.webhook import render as webhook_render
from maxclaw.push.adapters.webhook import sign
from maxclaw.push.adapters.webpush import topic_of
from maxclaw.push.addresses import is_private_ip, local_reason
from maxclaw.push.dispatcher import backoff_delay
from maxclaw.push.payload import build_payload, json_bytes, withdraw_payload

TOKEN = "a1" * 32
UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def a_decision(**fields: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": 7, "component_id": "call_1:q1", "thread_id": "t-1", "title": "Card",
        "body": "Keep the old field?", "allow_text": True, "sensitive": False,
        "options": [{"id": "keep", "label": "Keep", "recommended": True},
                    {"id": "drop", "label": "Drop", "recommended": False}]}
    row.update(fields)
    return row


def delivery(payload: dict[str, Any], kind: str = "notify", outbox_id: int = 41,
             attempt: int = 1, **config: Any) -> Delivery:
    return Delivery(outbox_id=outbox_id, user_id="u", device_id=3, decision_id=7, kind=kind,
                    payload=payload, platform="apns", attempt=attempt, secret=None,
                    config={"token": TOKEN, "topic": "com.example.maxclaw",
                            "environment": "sandbox", **config})


# -- APNs --------------------------------------------------------------------------------


def test_apns_alert_request_headers_and_body() -> None:
    payload = build_payload(a_decision(), "Refactor")
    [req] = render(delivery(payload), now_s=1_700_000_000)
    headers = req.headers()
    assert headers["apns-push-type"] == "alert"
    assert headers["apns-priority"] == "10"
    assert headers["apns-topic"] == "com.example.maxclaw"
    assert headers["apns-collapse-id"] == "ask:call_1:q1"
    assert UUID_RE.match(headers["apns-id"])
    assert req.token == TOKEN
    assert req.ttl_s
    assert req.ttl_s > 0
    aps = req.message["aps"]
    assert aps["alert"] == {"title": "Refactor", "body": "Keep the old field?"}
    assert aps["category"] == CATEGORY_CHOICE
    assert aps["mutable-content"] == 1
    assert aps["thread-id"] == "t-1"
    # the app builds its buttons from the payload it is handed whole
    assert req.message["maxclaw"]["actions"] == payload["actions"]
    assert req.message["maxclaw"]["apns_collapse_id"] == "ask:call_1:q1"


def test_apns_id_is_stable_across_retries_and_distinct_per_row() -> None:
    payload = build_payload(a_decision(), "t")
    first = render(delivery(payload, attempt=1), 0)[0].apns_id
    retry = render(delivery(payload, attempt=5), 0)[0].apns_id
    other = render(delivery(payload, outbox_id=42), 0)[0].apns_id
    assert first == retry != other
    assert uuid.UUID(first).version == 5


def test_apns_categories_follow_the_card_kind() -> None:
    reply_only = build_payload(a_decision(options=[], allow_text=True), "t")
    secret = build_payload(a_decision(options=[], sensitive=True), "t")
    assert render(delivery(reply_only), 0)[0].message["aps"]["category"] == CATEGORY_REPLY
    assert render(delivery(secret), 0)[0].message["aps"]["category"] == CATEGORY_SECRET


def test_apns_withdraw_is_a_silent_background_push() -> None:
    [req] = render(delivery(withdraw_payload(a_decision()), kind="withdraw"), 0)
    headers = req.headers()
    # Apple: background pushes must use apns-push-type background and priority 5, and an aps
    # with only content-available (no alert, sound or badge)
    assert headers["apns-push-type"] == "background"
    assert headers["apns-priority"] == "5"
    assert req.message["aps"] == {"content-available": 1}
    assert req.message["maxclaw"]["kind"] == "withdraw"
    assert headers["apns-collapse-id"] == "ask:call_1:q1"


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


def activity_row(event: str, cards: list[dict[str, Any]], token: str = "b2" * 40,
                 outbox_id: int = 41) -> Delivery:
    payload = {"v": 1, "kind": "live-activity", "event": event, "token": token,
               "timestamp": 1234, "open_count": len(cards), "cards": cards}
    return delivery(payload, kind="activity", outbox_id=outbox_id)


def a_card(i: int, question: str = "Keep the old field?") -> dict[str, Any]:
    return {"decision_id": i, "component_id": f"call_{i}:q1", "thread_id": None,
            "title": "Refactor", "question": question, "secret": False}


def checked_activity(req: Any, event: str) -> dict[str, Any]:
    """The ``aps`` of one Live Activity request, after checking it against Apple's rules."""
    headers = req.headers()
    assert headers["apns-push-type"] == "liveactivity"
    assert headers["apns-topic"] == "com.example.maxclaw.push-type.liveactivity"
    assert headers["apns-priority"] in ("5", "10")
    assert "apns-collapse-id" not in headers
    assert set(req.message) == {"aps"}
    aps: dict[str, Any] = req.message["aps"]
    assert APPLE_REQUIRED[event] <= set(aps) <= APPLE_ALLOWED[event], set(aps)
    assert aps["event"] == event
    assert isinstance(aps["timestamp"], int)
    assert len(json_bytes(req.message)) <= MAX_PAYLOAD
    return aps


@pytest.mark.parametrize("event", ["start", "update", "end"])
def test_apns_live_activity_events_carry_only_apples_keys(event: str) -> None:
    cards = [] if event == "end" else [a_card(2), a_card(1)]
    [req] = render(activity_row(event, cards), now_s=99)
    aps = checked_activity(req, event)
    assert req.token == "b2" * 40
    assert aps["timestamp"] == 1234  # when the state was computed, not when it was sent
    assert aps["content-state"] == {"open_count": len(cards), "cards": cards}
    if event == "start":
        assert aps["attributes-type"] == "MaxClawQuestionsAttributes"
        assert aps["alert"]["body"] == "2 open questions"
    if event == "end":
        assert aps["dismissal-date"] == 1234
        assert req.headers()["apns-priority"] == "5"
    else:
        assert req.headers()["apns-priority"] == "10"


def test_apns_live_activity_drops_the_oldest_cards_to_fit_4096_bytes() -> None:
    cards = [a_card(i, "🙂" * 120) for i in range(5, 0, -1)]  # 4 bytes a character
    payload = activity_row("update", cards).payload
    payload["cards"] = [{**c, "title": "🙂" * 60} for c in cards]
    [req] = render(delivery(payload, kind="activity"), now_s=0)
    aps = checked_activity(req, "update")
    shown = aps["content-state"]["cards"]
    assert 0 < len(shown) < 5
    assert [c["decision_id"] for c in shown] == [5, 4, 3, 2, 1][:len(shown)]
    assert aps["content-state"]["open_count"] == 5


def test_apns_question_pushes_carry_no_live_activity() -> None:
    """The activity is the ``activity`` rows' (every open card); a question's own push never
    updates or ends it, even on a device with an activity token."""
    payload = build_payload(a_decision(), "Refactor")
    assert [r.push_type for r in render(delivery(payload, live_activity_token="b2" * 40),
                                        0)] == ["alert"]
    assert [r.push_type for r in render(delivery(withdraw_payload(a_decision()),
                                                 kind="withdraw",
                                                 live_activity_token="b2" * 40), 0)] == [
        "background"]


def test_apns_message_fits_4096_bytes() -> None:
    options = [{"id": f"o{i}", "label": "ラベル" * 60, "recommended": False} for i in range(12)]
    payload = build_payload(a_decision(options=options, body="質問" * 1000), "T" * 300)
    [req] = render(delivery(payload), 0)
    assert len(json_bytes(req.message)) <= MAX_PAYLOAD
    assert [a["id"] for a in req.message["maxclaw"]["actions"]][:12] == [
        f"opt:o{i}" for i in range(12)]


def test_apns_collapse_id_is_at_most_64_bytes() -> None:
    long = "ask:" + "call_" + "x" * 80 + ":q1"
    short = apns_collapse_id(long)
    assert short is not None
    assert len(short.encode()) <= 64
    assert apns_collapse_id(long) == short  # deterministic: a withdraw finds it
    assert apns_collapse_id("ask:c:q1") == "ask:c:q1"


@pytest.mark.parametrize(("status", "reason", "retryable"), [
    ("400", "BadDeviceToken", False), ("410", "Unregistered", False),
    ("403", "InvalidProviderToken", False), ("403", "ExpiredProviderToken", True),
    ("429", "TooManyRequests", True), ("500", "InternalServerError", True),
    ("503", "ServiceUnavailable", True)])
def test_apns_error_classification(status: str, reason: str, retryable: bool) -> None:
    from aioapns.common import NotificationResult

    with pytest.raises(DeliveryError) as err:
        check_result(NotificationResult("id", status, description=reason))
    assert err.value.retryable is retryable
    assert reason in err.value.message
    assert status in err.value.message


# -- webhook, Web Push, HTTP -------------------------------------------------------------


def test_webhook_signature_is_hmac_sha256_of_the_raw_body() -> None:
    body = webhook_render(Delivery(5, "u", 1, 7, "notify", {"kind": "agent-question"},
                                   "webhook", {}, "s" * 16, 1))
    assert json.loads(body) == {"kind": "agent-question", "delivery_id": "5"}
    expected = hmac.new(b"s" * 16, body, hashlib.sha256).hexdigest()
    assert sign("s" * 16, body) == f"sha256={expected}"


def test_webpush_topic_is_32_base64url_chars() -> None:
    topic = topic_of("ask:call_7:q1")
    assert topic is not None
    assert len(topic) == 32
    assert re.fullmatch(r"[A-Za-z0-9_-]{32}", topic)
    base64.urlsafe_b64decode(topic + "=" * (-len(topic) % 4))
    assert topic_of("ask:call_7:q1") == topic != topic_of("ask:call_7:q2")


@pytest.mark.parametrize(("status", "retryable"), [
    (500, True), (502, True), (503, True), (429, True), (408, True),
    (400, False), (401, False), (403, False), (404, False), (301, False)])
def test_http_status_classification(status: int, retryable: bool) -> None:
    with pytest.raises(DeliveryError) as err:
        check_http_status(status, "nope", "7", "webhook")
    assert err.value.retryable is retryable
    assert err.value.retry_after_s == 7.0
    assert f"HTTP {status}" in err.value.message


def test_http_2xx_passes() -> None:
    check_http_status(201, "", None, "push service")


def test_backoff_doubles_caps_and_jitters() -> None:
    rng = random.Random(1)
    for attempt in range(1, 12):
        ceiling = min(600.0, 2.0 * 2 ** (attempt - 1))
        delays = [backoff_delay(attempt, base_s=2.0, max_s=600.0, rng=rng) for _ in range(50)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays)
        assert len(set(delays)) > 1  # jittered


@pytest.mark.parametrize("host", ["127.0.0.1", "10.1.2.3", "192.168.0.9", "172.16.5.5",
                                  "169.254.1.1", "::1", "fd00::1", "0.0.0.0", "100.64.0.1",
                                  "::ffff:10.0.0.1", "localhost", "api.localhost"])
def test_private_addresses_are_refused(host: str) -> None:
    assert local_reason(host) is not None


@pytest.mark.parametrize("host", ["93.184.216.34", "2606:4700::1111", "push.example.com"])
def test_public_addresses_pass_the_literal_check(host: str) -> None:
    assert local_reason(host) is None


def test_is_private_ip() -> None:
    assert is_private_ip("224.0.0.1")
    assert not is_private_ip("8.8.8.8")
