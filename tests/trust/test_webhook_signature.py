"""Finding 8 (webhook replay): the webhook's V2 signature covers a timestamp and the delivery
id as well as the body, so a receiver refuses a replayed or re-dated request. The receiver
below is the verification snippet from docs/security.md, word for word."""

from __future__ import annotations

import hashlib
import hmac
import time

import pytest

from tests.cards import CHOICE, TEXT, new_thread, post_card
from tests.conftest import Harness
from tests.integration.push_fakes import Endpoint
from tests.integration.test_push_delivery import SECRET_KEY, push  # noqa: F401 (fixture)

# --- the snippet in docs/security.md ---------------------------------------------------------
REPLAY_WINDOW_S = 300
seen: dict[str, float] = {}  # delivery id -> when it was accepted


def verify(secret: str, headers: dict[str, str], body: bytes) -> bool:
    timestamp = headers["X-MaxClaw-Timestamp"]
    delivery_id = headers["X-MaxClaw-Delivery"]
    signed = f"{timestamp}.{delivery_id}.".encode() + body
    expected = "sha256=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, headers["X-MaxClaw-Signature-V2"]):
        return False
    now = time.time()
    if abs(now - int(timestamp)) > REPLAY_WINDOW_S:
        return False
    for old in [d for d, t in seen.items() if now - t > 2 * REPLAY_WINDOW_S]:
        del seen[old]
    if delivery_id in seen:
        return False  # a replay (a retry of ours gets the same answer: it was delivered)
    seen[delivery_id] = now
    return True
# --- end of the snippet ----------------------------------------------------------------------


async def test_the_signature_covers_timestamp_and_delivery_id(
        push: Harness, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    a = await push.actor("max")
    async with Endpoint() as endpoint:
        resp = await a.user.post("/v1/push/devices", json={
            "platform": "webhook", "url": f"{endpoint.url}/hooks/maxclaw", "secret": SECRET_KEY})
        assert resp.status_code == 201, resp.text
        tid = await new_thread(a.user, title="Refactor")
        await post_card(a.agent, tid, CHOICE, TEXT)
        assert await push.services.push.dispatcher.run_until_idle() == 2
    assert len(endpoint.hits) == 2
    seen.clear()
    for hit in endpoint.hits:
        headers = {k: hit.headers[k] for k in ("X-MaxClaw-Timestamp", "X-MaxClaw-Delivery",
                                               "X-MaxClaw-Signature-V2")}
        assert abs(int(headers["X-MaxClaw-Timestamp"]) - time.time()) < 60
        assert headers["X-MaxClaw-Delivery"] == hit.headers["Idempotency-Key"]
        # another delivery id, another time, another body or another secret: refused
        other = dict(headers, **{"X-MaxClaw-Delivery": "outbox-1:1"})
        assert not verify(SECRET_KEY, other, hit.body)
        late = dict(headers, **{"X-MaxClaw-Timestamp": str(int(headers["X-MaxClaw-Timestamp"])
                                                           - 10)})
        assert not verify(SECRET_KEY, late, hit.body)
        assert not verify(SECRET_KEY, headers, hit.body + b" ")
        assert not verify("another secret", headers, hit.body)
        # the request as sent: accepted once; the same request again is a replay
        assert verify(SECRET_KEY, headers, hit.body)
        assert not verify(SECRET_KEY, headers, hit.body)
    # a genuine request replayed after the window: refused even by a receiver that forgot it
    seen.clear()
    hit = endpoint.hits[0]
    stale = {k: hit.headers[k] for k in ("X-MaxClaw-Timestamp", "X-MaxClaw-Delivery",
                                         "X-MaxClaw-Signature-V2")}
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + REPLAY_WINDOW_S + 1)
    assert not verify(SECRET_KEY, stale, hit.body)
