"""Push devices: the addresses a user's notifications go to (a browser's PushSubscription, an
APNs token, a webhook URL, a development log), registered, listed, tested and forgotten."""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from maxclaw.auth.service import Principal, parse_int_id
from maxclaw.db.database import Database
from maxclaw.errors import Invalid, NotFound, RateLimited
from maxclaw.push import store
from maxclaw.push.adapters.webpush import vapid_public_key
from maxclaw.push.addresses import (
    host_of,
    port_reason,
    resolved_private_reason,
    unresolved_reason,
)
from maxclaw.push.sample_notification import enqueue_test
from maxclaw.settings import Settings
from maxclaw.timefmt import rfc3339

APNS_TOKEN = re.compile(r"^[0-9A-Fa-f]{64,200}$")


def _b64url(value: str, loc: list[str | int], size: int | None = None) -> bytes:
    try:
        raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
    except (binascii.Error, ValueError):
        raise Invalid.at(loc, "must be base64url (as PushSubscription.toJSON() gives it)") \
            from None
    if size is not None and len(raw) != size:
        raise Invalid.at(loc, f"must decode to {size} bytes, not {len(raw)}")
    return raw


class Devices:
    """A user's push devices."""

    def __init__(self, db: Database, settings: Settings) -> None:
        self.db = db
        self.settings = settings

    async def register_device(self, who: Principal, body: dict[str, Any]) -> dict[str, Any]:
        """Store (or refresh) one of the user's push addresses; returns ``{"id", "platform"}``."""
        platform = body["platform"]
        secret: str | None = None
        if platform == "webpush":
            endpoint = await self._public_url(body["endpoint"], ["body", "endpoint"],
                                              https_only=True)
            keys = body["keys"]
            point = _b64url(keys["p256dh"], ["body", "keys", "p256dh"], 65)
            if point[0] != 4:
                raise Invalid.at(["body", "keys", "p256dh"], "must be an uncompressed P-256 point")
            _b64url(keys["auth"], ["body", "keys", "auth"], 16)
            address = endpoint
            config: dict[str, Any] = {"endpoint": endpoint,
                                      "keys": {"p256dh": keys["p256dh"], "auth": keys["auth"]}}
        elif platform == "apns":
            token = body["token"]
            if not APNS_TOKEN.match(token):
                raise Invalid.at(["body", "token"], "must be the device token as hex")
            address = token.lower()
            config = {"token": address, "topic": body["topic"],
                      "environment": body["environment"]}
            for key in ("live_activity_token", "live_activity_start_token"):
                if body.get(key):
                    config[key] = body[key]
        elif platform == "webhook":
            address = await self._public_url(body["url"], ["body", "url"], must_resolve=True)
            config = {"url": address}
            secret = body["secret"]
        else:  # log: development only; the payload lands in the server's log
            if not self.settings.push_allow_log_devices:
                raise Invalid.at(["body", "platform"],
                                 "'log' devices are for development and off on this server "
                                 "(an operator can set MAXCLAW_PUSH_ALLOW_LOG_DEVICES=true)")
            address, config = "log", {}
        limit = self.settings.quota_devices_per_user
        async with self.db.transaction(notify=False) as conn:
            row = await store.save_device(conn, user_id=who.user_id, platform=platform,
                                          address=address, config=config, secret=secret,
                                          max_devices=limit)
            if row is not None and platform == "apns":
                # a new activity token shows the state now; a start token starts one if due
                await store.refresh_live_activities(conn, user_id=who.user_id)
        if row is None:
            raise RateLimited(f"This user already has {limit} push devices; forget one "
                              "(DELETE /v1/push/devices/{id}) before adding another.",
                              retry_after_s=60, limit=limit)
        return {"id": row.id, "platform": row.platform}

    async def _public_url(self, url: str, loc: list[str | int], *, https_only: bool = False,
                          must_resolve: bool = False) -> str:
        """``url`` if pushes may go there; ``422`` naming why not. ``must_resolve``: a host
        that does not resolve is refused even where private addresses are allowed (a webhook
        that can never be delivered is better refused now than dead in the outbox later)."""
        try:
            host = host_of(url)
        except ValueError as exc:
            raise Invalid.at(loc, str(exc)) from exc
        if self.settings.push_allow_private_urls:
            reason = await unresolved_reason(host) if must_resolve else None
            if reason:
                raise Invalid.at(loc, f"{reason}; register a URL whose host name resolves")
        else:
            if https_only and not url.startswith("https://"):
                raise Invalid.at(loc, "must be an https URL")
            reason = port_reason(url) or await resolved_private_reason(host)
            if reason:
                raise Invalid.at(loc, f"{reason}; push targets must be public "
                                      "(an operator can set MAXCLAW_PUSH_ALLOW_PRIVATE_URLS=true)")
        return url

    async def delete_device(self, who: Principal, device_id: str) -> None:
        """Forget a device (its queued pushes go with it); another user's is 404."""
        numeric = parse_int_id(device_id, "push device")
        async with self.db.connection() as conn:
            if not await store.delete_device(conn, user_id=who.user_id, device_id=numeric):
                raise NotFound("No such push device.")

    async def list_devices(self, who: Principal) -> list[dict[str, Any]]:
        """The user's devices without secrets or keys (platform, where, since when)."""
        async with self.db.connection() as conn:
            rows = await store.list_devices(conn, user_id=who.user_id)
        return [{"id": r.id, "platform": r.platform, "created_at": rfc3339(r.created_at),
                 "address": _display_address(r.platform, r.config)} for r in rows]

    async def send_test(self, who: Principal, device_id: int | None) -> dict[str, Any]:
        """Queue a test notification for the user's devices (or one); ``{"queued": n}``."""
        async with self.db.connection() as conn:  # one statement; its hint wakes dispatchers
            queued = await enqueue_test(conn, user_id=who.user_id, device_id=device_id)
        if device_id is not None and queued == 0:
            raise NotFound("No such push device.")
        return {"queued": queued}

    def client_config(self) -> dict[str, Any]:
        """What a browser needs to subscribe (the VAPID public key, when one is configured)."""
        key = self.settings.vapid_private_key
        return {"vapid_public_key": vapid_public_key(key) if key else None}


def _display_address(platform: str, config: dict[str, object]) -> str | None:
    """Enough of the address to recognise a device, nothing that would let one push to it."""
    if platform == "webpush":
        try:
            return host_of(str(config["endpoint"]))
        except ValueError:  # stored before today's host rules: it is never pushed to anyway
            return None
    if platform == "webhook":
        return str(config["url"])
    if platform == "apns":
        return f"{config['topic']} ({config['environment']}) …{str(config['token'])[-6:]}"
    return None
