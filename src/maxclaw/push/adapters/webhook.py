"""Webhook: the payload as JSON, signed with the device's secret.

``X-MaxClaw-Signature-V2: t=<unix seconds>,d=<delivery id>,sha256=<hex HMAC-SHA256 of
"<t>.<d>.<raw body>">`` (docs/api.md), one header, lets a receiver check the body came from
this server, for this delivery, recently: it refuses a ``t`` more than ``REPLAY_WINDOW_S`` from
its clock and a ``d`` it has seen inside that window (docs/api.md has the snippet). ``t`` is new
on every attempt; ``X-MaxClaw-Timestamp`` and ``X-MaxClaw-Delivery`` repeat ``t`` and ``d`` for
receivers that read them there. ``X-MaxClaw-Signature`` (the body alone) stays
for receivers written before; it does not stop a replay. ``Idempotency-Key`` (and
``delivery_id`` in the body) stays the same across retries of one outbox row, so a receiver
that saw it already can answer 2xx and drop it.
"""

from __future__ import annotations

import hashlib
import hmac
import time

from maxclaw.push.adapters.base import Delivery, DeliveryError, check_http_status
from maxclaw.push.adapters.http import HttpSender
from maxclaw.push.payload import json_bytes

SIGNATURE_HEADER = "X-MaxClaw-Signature"
SIGNATURE_V2_HEADER = "X-MaxClaw-Signature-V2"
TIMESTAMP_HEADER = "X-MaxClaw-Timestamp"
DELIVERY_HEADER = "X-MaxClaw-Delivery"
REPLAY_WINDOW_S = 300  # what receivers are told to accept, either side of their clock


def sign(secret: str, body: bytes) -> str:
    """The signature header's value for ``body``."""
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def sign_v2(secret: str, timestamp: int, delivery_id: str, body: bytes) -> str:
    """The V2 header's value, ``t=…,d=…,sha256=…``: the HMAC covers the timestamp, the
    delivery id and the body, and the header carries all three inputs a receiver needs."""
    signed = f"{timestamp}.{delivery_id}.".encode() + body
    digest = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    return f"t={timestamp},d={delivery_id},sha256={digest}"


def render(delivery: Delivery) -> bytes:
    """The raw body: the payload plus the delivery id."""
    return json_bytes({**delivery.payload, "delivery_id": delivery.idempotency_key})


class WebhookAdapter:
    platform = "webhook"

    def __init__(self, http: HttpSender) -> None:
        self.http = http

    async def send(self, delivery: Delivery) -> None:
        """POST the signed JSON; any 2xx is a delivery."""
        if not delivery.secret:
            raise DeliveryError("the webhook device has no secret; register it again",
                                retryable=False)
        body = render(delivery)
        timestamp = int(time.time())
        headers = {
            "Content-Type": "application/json",
            SIGNATURE_HEADER: sign(delivery.secret, body),
            SIGNATURE_V2_HEADER: sign_v2(delivery.secret, timestamp, delivery.idempotency_key,
                                         body),
            TIMESTAMP_HEADER: str(timestamp),
            "Idempotency-Key": delivery.idempotency_key,
            DELIVERY_HEADER: delivery.idempotency_key,
        }
        resp = await self.http.post(delivery.config["url"], content=body, headers=headers,
                                    what="webhook")
        check_http_status(resp.status, resp.text, resp.retry_after,
                          "webhook")

    async def close(self) -> None:
        await self.http.close()
