"""Webhook: the payload as JSON, signed with the device's secret.

``X-MaxClaw-Signature: sha256=<hex HMAC-SHA256 of the raw body>`` lets the receiver check the
body came from this server; ``Idempotency-Key`` (and ``delivery_id`` in the body) stays the same
across retries of one outbox row, so a receiver that saw it already can answer 2xx and drop it.
"""

from __future__ import annotations

import hashlib
import hmac

from maxclaw.push.adapters.base import Delivery, DeliveryError, check_http_status
from maxclaw.push.adapters.http import HttpSender
from maxclaw.push.payload import json_bytes

SIGNATURE_HEADER = "X-MaxClaw-Signature"


def sign(secret: str, body: bytes) -> str:
    """The signature header's value for ``body``."""
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


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
        headers = {
            "Content-Type": "application/json",
            SIGNATURE_HEADER: sign(delivery.secret, body),
            "Idempotency-Key": delivery.idempotency_key,
            "X-MaxClaw-Delivery": delivery.idempotency_key,
        }
        resp = await self.http.post(delivery.config["url"], content=body, headers=headers,
                                    what="webhook")
        check_http_status(resp.status, resp.text, resp.retry_after,
                          "webhook")

    async def close(self) -> None:
        await self.http.close()
