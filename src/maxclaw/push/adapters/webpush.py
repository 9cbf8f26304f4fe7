"""Web Push (RFC 8030) with message encryption (RFC 8291, ``aes128gcm``) and VAPID (RFC 8292).

pywebpush does the encryption (through http_ece) and py_vapid the signing; the POST itself
goes through the shared aiohttp session, so sends never block the event loop (pywebpush's own
``webpush()`` is synchronous, on ``requests``).

The ``Topic`` header (RFC 8030 §5.4) is derived from the collapse id, so a push service that
still holds an undelivered notification replaces it with the later withdraw.
"""

from __future__ import annotations

import base64
import hashlib
import time
from typing import Any
from urllib.parse import urlsplit

from py_vapid import Vapid

from maxclaw.push.adapters.base import Delivery, DeliveryError, check_http_status
from maxclaw.push.adapters.http import HttpSender
from maxclaw.push.payload import fit_payload, json_bytes

# 4,096 bytes per push message, less the aes128gcm header (86), the tag (16) and padding (1)
MAX_PLAINTEXT = 3993
TTL_S = 24 * 3600
VAPID_TTL_S = 12 * 3600


def load_vapid(private_key: str) -> Vapid:
    """A VAPID signer from a PEM key or a base64url raw/DER key (``MAXCLAW_VAPID_PRIVATE_KEY``)."""
    text = private_key.strip()
    if text.startswith("-----BEGIN"):
        return Vapid.from_pem(text.encode())
    return Vapid.from_string(text)


def vapid_public_key(private_key: str) -> str:
    """The base64url uncompressed public key browsers take as ``applicationServerKey``."""
    from cryptography.hazmat.primitives import serialization

    raw = load_vapid(private_key).public_key.public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def topic_of(collapse_id: str | None) -> str | None:
    """RFC 8030 topics are at most 32 base64url characters: a digest of the collapse id."""
    if not collapse_id:
        return None
    digest = hashlib.sha256(collapse_id.encode()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()[:32]


def origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


class WebPushAdapter:
    platform = "webpush"

    def __init__(self, http: HttpSender, *, vapid_private_key: str | None,
                 vapid_subject: str) -> None:
        self.http = http
        self.vapid_subject = vapid_subject
        self._vapid = load_vapid(vapid_private_key) if vapid_private_key else None

    def encrypt(self, delivery: Delivery) -> tuple[bytes, dict[str, str]]:
        """The encrypted body and the headers pywebpush's encoding implies."""
        subscription = {"endpoint": delivery.config["endpoint"], "keys": delivery.config["keys"]}
        data = json_bytes(fit_payload(delivery.payload, MAX_PLAINTEXT))
        # pywebpush (and requests under it) loads at the first Web Push, not with the server
        from pywebpush import WebPusher, WebPushException

        try:
            encoded = WebPusher(subscription).encode(data, content_encoding="aes128gcm")
        except (WebPushException, ValueError, TypeError) as exc:
            raise DeliveryError(f"cannot encrypt for this subscription: {exc}",
                                retryable=False) from exc
        return bytes(encoded["body"]), {"Content-Encoding": "aes128gcm"}

    def headers(self, delivery: Delivery) -> dict[str, str]:
        """VAPID, TTL, urgency, topic and the idempotency key."""
        if self._vapid is None:
            raise DeliveryError("Web Push needs a VAPID key: set MAXCLAW_VAPID_PRIVATE_KEY",
                                retryable=False)
        claims: dict[str, Any] = {"sub": self.vapid_subject,
                                  "aud": origin_of(delivery.config["endpoint"]),
                                  "exp": int(time.time()) + VAPID_TTL_S}
        headers: dict[str, str] = dict(self._vapid.sign(claims))
        headers.update({
            "TTL": str(TTL_S),
            # a passive (quiet hours) notification need not wake a sleeping phone's radio
            "Urgency": "high" if delivery.kind == "notify"
            and delivery.payload.get("interruption_level") != "passive" else "normal",
            "Content-Type": "application/octet-stream",
            "Idempotency-Key": delivery.idempotency_key,
        })
        topic = topic_of(delivery.payload.get("collapse_id"))
        if topic:
            headers["Topic"] = topic
        return headers

    async def send(self, delivery: Delivery) -> None:
        """Encrypt and POST to the subscription's endpoint; 404/410 mean it is gone."""
        headers = self.headers(delivery)
        body, encoding = self.encrypt(delivery)
        headers.update(encoding)
        resp = await self.http.post(delivery.config["endpoint"], content=body, headers=headers,
                                    what="push service")
        if resp.status in (404, 410):
            raise DeliveryError(
                f"push service answered HTTP {resp.status}: the subscription expired "
                "or was revoked; the browser must subscribe again", device_gone=True)
        check_http_status(resp.status, resp.text, resp.retry_after,
                          "push service")

    async def close(self) -> None:
        await self.http.close()
