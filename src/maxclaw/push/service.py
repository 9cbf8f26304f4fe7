"""Push rules: registering devices, answering from a notification, and the dispatcher's parts.

Devices are addresses (a browser's PushSubscription, an APNs token, a webhook URL); the
outbox (``outbox.py``) fans each decision out to them and the dispatcher sends. An action
taken on a notification is an answer like any other: it settles the decision through the
decisions service, via ``push``.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import asyncpg

from maxclaw.auth.service import Principal, parse_int_id
from maxclaw.clock import Clock
from maxclaw.db.database import Database
from maxclaw.errors import Invalid, NotFound, RateLimited
from maxclaw.metrics import Metrics
from maxclaw.push import store
from maxclaw.push.action_tokens import ActionTokens, stamp_adapters
from maxclaw.push.adapters.apns import ApnsAdapter
from maxclaw.push.adapters.base import Adapter
from maxclaw.push.adapters.http import HttpSender
from maxclaw.push.adapters.log import LogAdapter
from maxclaw.push.adapters.webhook import WebhookAdapter
from maxclaw.push.adapters.webpush import WebPushAdapter, vapid_public_key
from maxclaw.push.addresses import host_of, port_reason, resolved_private_reason
from maxclaw.push.dispatcher import Dispatcher
from maxclaw.push.test_notification import enqueue_test
from maxclaw.quotas import Quotas
from maxclaw.settings import Settings
from maxclaw.timefmt import rfc3339

# runs inside the answer's transaction (``decisions.service.AnswerGuard``, restated here)
AnswerGuard = Callable[[asyncpg.Connection], Awaitable[None]]


class DecisionSettler(Protocol):
    """What push needs of the decisions queue: settle one (``DecisionService.settle``).
    A protocol, so push does not import decisions (decisions imports push's outbox)."""

    async def settle(self, who: Principal, decision_id: int | str, selected: Any, text: Any,
                     via: str = ..., guard: AnswerGuard | None = ...) -> dict[str, Any]: ...

    async def revoke(self, who: Principal, decision_id: int | str, via: str = ...,
                     guard: AnswerGuard | None = ...) -> dict[str, Any]: ...


OPTION_ACTION = re.compile(r"^opt:(.+)$", re.DOTALL)
REVOKE_ACTION = "revoke"  # the Revoke button of "Main answered … for you"
APNS_TOKEN = re.compile(r"^[0-9A-Fa-f]{64,200}$")
HTTP_TIMEOUT_S = 10.0


def build_adapters(settings: Settings, http: HttpSender | None = None) -> dict[str, Adapter]:
    """The production adapters, configured from settings."""
    http = http or HttpSender(timeout_s=HTTP_TIMEOUT_S,
                              allow_private=settings.push_allow_private_urls)
    return {
        "log": LogAdapter(log_payloads=settings.push_log_payloads),
        "webhook": WebhookAdapter(http),
        "webpush": WebPushAdapter(http, vapid_private_key=settings.vapid_private_key,
                                  vapid_subject=settings.vapid_subject),
        "apns": ApnsAdapter(key_path=settings.apns_key_path, key_id=settings.apns_key_id,
                            team_id=settings.apns_team_id),
    }


def _b64url(value: str, loc: list[str | int], size: int | None = None) -> bytes:
    try:
        raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
    except (binascii.Error, ValueError):
        raise Invalid.at(loc, "must be base64url (as PushSubscription.toJSON() gives it)") \
            from None
    if size is not None and len(raw) != size:
        raise Invalid.at(loc, f"must decode to {size} bytes, not {len(raw)}")
    return raw


class PushService:
    """Devices and push actions for user clients; owns the dispatcher job."""

    def __init__(self, db: Database, settings: Settings, metrics: Metrics, clock: Clock,
                 decisions: DecisionSettler,
                 adapters: dict[str, Adapter] | None = None,
                 quotas: Quotas | None = None) -> None:
        self.db = db
        self.settings = settings
        self.decisions = decisions
        adapters = adapters if adapters is not None else build_adapters(settings)
        # notifications carry a per-device action token, minted as they are sent
        self.adapters = stamp_adapters(adapters, db, clock)
        self.action_tokens = ActionTokens(db, clock)
        self.dispatcher = Dispatcher(self.db, self.adapters, settings=self.settings,
                                     metrics=metrics, clock=clock, quotas=quotas)

    # -- devices ---------------------------------------------------------------------------

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
            if body.get("live_activity_token"):
                config["live_activity_token"] = body["live_activity_token"]
        elif platform == "webhook":
            address = await self._public_url(body["url"], ["body", "url"])
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
        if row is None:
            raise RateLimited(f"This user already has {limit} push devices; forget one "
                              "(DELETE /v1/push/devices/{id}) before adding another.",
                              retry_after_s=60)
        return {"id": row.id, "platform": row.platform}

    async def _public_url(self, url: str, loc: list[str | int], *,
                          https_only: bool = False) -> str:
        try:
            host = host_of(url)
        except ValueError as exc:
            raise Invalid.at(loc, str(exc)) from exc
        if not self.settings.push_allow_private_urls:
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

    # -- actions ---------------------------------------------------------------------------

    async def act(self, who: Principal, decision_id: int, action: str,
                  text: str | None) -> dict[str, Any]:
        """Answer a decision from a notification button or its reply box (via ``push``), or
        revoke Main's answer to it (``revoke``)."""
        if action == REVOKE_ACTION:
            revoked: dict[str, Any] = await self.decisions.revoke(who, decision_id, via="push")
            return revoked
        selected, note = _parse_action(action, text)
        result: dict[str, Any] = await self.decisions.settle(who, decision_id, selected, note,
                                                             via="push")
        return result

    async def act_with_token(self, token: str, action: str, text: str | None,
                             decision_id: int | None = None) -> dict[str, Any]:
        """The same, with a notification's action token instead of a bearer token: the
        token is spent in the answer's transaction (``action_tokens.py`` lists refusals)."""
        if action == REVOKE_ACTION:
            who, token_decision, guard = await self.action_tokens.check(token, decision_id,
                                                                        scope="revoke")
            revoked: dict[str, Any] = await self.decisions.revoke(who, token_decision,
                                                                  via="push", guard=guard)
            return revoked
        selected, note = _parse_action(action, text)
        who, token_decision, guard = await self.action_tokens.check(token, decision_id)
        result: dict[str, Any] = await self.decisions.settle(who, token_decision, selected,
                                                             note, via="push", guard=guard)
        return result


def _parse_action(action: str, text: str | None) -> tuple[list[str], str | None]:
    """``opt:<id>`` or ``other`` (with text) as the card's ``selected`` and note."""
    note = text if text is not None and text.strip() else None
    match = OPTION_ACTION.match(action)
    if match:
        selected = [match.group(1)]
    elif action == "other":
        if note is None:
            raise Invalid.at(["body", "text"], "the reply box needs some text")
        selected = []
    else:
        raise Invalid.at(["body", "action"], "must be 'opt:<option id>', 'other' or 'revoke'")
    return selected, note


def _display_address(platform: str, config: dict[str, object]) -> str | None:
    """Enough of the address to recognise a device, nothing that would let one push to it."""
    if platform == "webpush":
        return host_of(str(config["endpoint"]))
    if platform == "webhook":
        return str(config["url"])
    if platform == "apns":
        return f"{config['topic']} ({config['environment']}) …{str(config['token'])[-6:]}"
    return None


class CloseAdapters:
    """With the dispatcher off (tests, API-only replicas), still release the adapters'
    connections at shutdown, in case something drove the dispatcher by hand."""

    name = "push-adapters"

    def __init__(self, push: PushService) -> None:
        self.push = push

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        await self.push.dispatcher.close()
