"""APNs over HTTP/2 with token (JWT, ES256) authentication, through ``aioapns``.

One outbox row becomes one or two APNs requests:
- ``notify``: an ``alert`` push (priority 10) whose ``aps.category`` names the action set and
  whose custom key ``maxclaw`` carries the payload (actions and reply box), so the app's
  notification service extension can build the buttons; ``apns-collapse-id`` is the payload's
  collapse id, so a later push for the same card replaces this one.
- ``withdraw``: a ``background`` push (``content-available``, priority 5, same collapse id)
  telling the app to remove the delivered notification.
- ``activity``: one ``liveactivity`` push (topic ``<bundle>.push-type.liveactivity``) to the
  token the row names, with event ``start`` (push-to-start token), ``update`` or ``end``: the
  whole Live Activity state the row carries (every open decision of the user, newest first;
  ``maxclaw_refresh_live_activities`` in ``db/live.sql`` decides which event and queues it).

``apns-id`` is a UUID derived from the outbox id (stable across retries of one row).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import ssl
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from maxclaw.prefs.catalogue import count_text
from maxclaw.push.adapters.base import Delivery, DeliveryError
from maxclaw.push.payload import (
    SECRET_PLACEHOLDER,
    TAKE_BACK_CATEGORY,
    encoded_size,
    fit_payload,
)

# aioapns (and aiohttp under it) loads when the first APNs client is made, not with the server:
# most servers never send to APNs, and every start paid for it (docs/benchmarks.md, issue 33
# item 4, fifth pass)
if TYPE_CHECKING:
    from aioapns import APNs, NotificationRequest
    from aioapns.common import NotificationResult

log = logging.getLogger("maxclaw.push.apns")

MAX_PAYLOAD = 4096  # APNs' limit for a regular push, in bytes
APNS_NAMESPACE = uuid.UUID("6f1d3a52-6a63-4f0e-9a57-6d6178636c61")
NOTIFY_TTL_S = 24 * 3600
# APNs answers these with a reason that will not change on retry
PERMANENT_STATUSES = {"400", "404", "405", "410", "413"}
RETRYABLE_403_REASONS = {"ExpiredProviderToken"}

CATEGORY_CHOICE = "MAXCLAW_ASK_CHOICE"  # buttons (built from maxclaw.actions) + maybe a reply
# "Main answered … for you": Why? (opens the app at maxclaw.url) and Revoke (its revoke token)
CATEGORY_MAIN_ANSWERED = "MAXCLAW_MAIN_ANSWERED"
CATEGORY_REPLY = "MAXCLAW_ASK_REPLY"  # only a text reply ("Reply…")
CATEGORY_SECRET = "MAXCLAW_ASK_SECRET"  # only a text reply ("Input (not echoed)…")
# the app's own confirmation of an answer it sent from a notification: "Take back" (its retract
# token comes in the answer's response, ``take_back``; never pushed)
CATEGORY_TAKE_BACK = TAKE_BACK_CATEGORY


@dataclass(frozen=True)
class ApnsRequest:
    """One HTTP/2 request to APNs, before aioapns turns it into headers."""

    token: str
    topic: str
    push_type: str  # alert | background | liveactivity
    priority: int
    collapse_id: str | None
    apns_id: str
    ttl_s: int | None
    message: dict[str, Any]

    def headers(self) -> dict[str, str]:
        """The ``apns-*`` headers this request is sent with (``aioapns`` writes the same)."""
        out = {"apns-id": self.apns_id, "apns-topic": self.topic,
               "apns-push-type": self.push_type, "apns-priority": str(self.priority)}
        if self.collapse_id is not None:
            out["apns-collapse-id"] = self.collapse_id
        return out


def apns_id(outbox_id: int, part: str) -> str:
    """A UUID per (outbox row, request part), the same on every retry of that row."""
    return str(uuid.uuid5(APNS_NAMESPACE, f"maxclaw-push:{outbox_id}:{part}"))


def apns_collapse_id(collapse_id: str | None) -> str | None:
    """APNs takes at most 64 bytes; a longer collapse id is replaced by a digest."""
    if collapse_id is None or len(collapse_id.encode()) <= 64:
        return collapse_id
    return "ask:" + hashlib.sha256(collapse_id.encode()).hexdigest()[:56]


def category_of(payload: dict[str, Any]) -> str:
    if payload.get("kind") == "main-answered":
        return CATEGORY_MAIN_ANSWERED
    reply = payload.get("reply") or {}
    if reply.get("placeholder") == SECRET_PLACEHOLDER:
        return CATEGORY_SECRET
    return CATEGORY_CHOICE if payload.get("actions") else CATEGORY_REPLY


def alert_message(payload: dict[str, Any], collapse: str | None) -> dict[str, Any]:
    # the dispatcher's shaping decided how loudly (push/shaping.py): passive in his quiet
    # hours (and then no sound), time-sensitive only when the agent asked
    level = str(payload.get("interruption_level") or "active")
    aps: dict[str, Any] = {"alert": {"title": payload["title"], "body": payload["body"]},
                           "category": category_of(payload),
                           "thread-id": payload.get("thread_id") or "", "mutable-content": 1,
                           "interruption-level": level}
    if level != "passive":
        aps["sound"] = "default"
    return {"aps": aps, "maxclaw": {**payload, "apns_collapse_id": collapse}}


def fitted_alert(payload: dict[str, Any], collapse: str | None) -> dict[str, Any]:
    """The alert message, shrinking the payload until the whole JSON fits APNs' limit."""
    message = alert_message(payload, collapse)
    limit = MAX_PAYLOAD // 2
    while encoded_size(message) > MAX_PAYLOAD and limit >= 256:
        message = alert_message(fit_payload(payload, limit), collapse)
        limit //= 2
    return message


# The ActivityAttributes type the native app declares (docs/rich-message.md, "Live Activity");
# a push-to-start names it in ``attributes-type``, and ``attributes`` are its fixed fields.
ACTIVITY_ATTRIBUTES_TYPE = "MaxClawQuestionsAttributes"
ACTIVITY_ATTRIBUTES = {"app": "MaxClaw"}
# Apple's documented keys of a Live Activity push's ``aps``, per event (tests check each
# rendered message against these)
ACTIVITY_KEYS = {
    "start": {"timestamp", "event", "content-state", "attributes-type", "attributes", "alert",
              "stale-date", "relevance-score"},
    "update": {"timestamp", "event", "content-state", "stale-date", "alert",
               "relevance-score"},
    "end": {"timestamp", "event", "content-state", "dismissal-date"},
}
ACTIVITY_PRIORITY = {"start": 10, "update": 10, "end": 5}


def activity_state(payload: dict[str, Any]) -> dict[str, Any]:
    """The content state: how many questions are open and the newest few (question text only:
    a decision row never holds an answer)."""
    cards = list(payload.get("cards") or [])
    return {"open_count": int(payload.get("open_count") or 0), "cards": cards}


def activity_aps(payload: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    event = str(payload["event"])
    timestamp = int(payload["timestamp"])
    aps: dict[str, Any] = {"timestamp": timestamp, "event": event, "content-state": state}
    if event == "start":
        count = state["open_count"]
        aps["attributes-type"] = ACTIVITY_ATTRIBUTES_TYPE
        aps["attributes"] = dict(ACTIVITY_ATTRIBUTES)
        aps["alert"] = {"title": "MaxClaw", "body": count_text(
            str(payload.get("locale") or "en"), "activity.open", count)}
    elif event == "end":
        aps["dismissal-date"] = timestamp  # gone from the Lock Screen at once
    return aps


def live_activity_message(payload: dict[str, Any]) -> dict[str, Any]:
    """The ``aps`` of an ``activity`` row, within APNs' 4 KB: the oldest shown cards are
    dropped first (``open_count`` still says how many are open)."""
    state = activity_state(payload)
    message = {"aps": activity_aps(payload, state)}
    while encoded_size(message) > MAX_PAYLOAD and state["cards"]:
        state = {**state, "cards": state["cards"][:-1]}
        message = {"aps": activity_aps(payload, state)}
    return message


def activity_request(delivery: Delivery) -> ApnsRequest:
    payload = delivery.payload
    event = str(payload["event"])
    return ApnsRequest(
        token=str(payload["token"]), topic=f"{delivery.config['topic']}.push-type.liveactivity",
        push_type="liveactivity", priority=ACTIVITY_PRIORITY[event], collapse_id=None,
        apns_id=apns_id(delivery.outbox_id, "activity"), ttl_s=None,
        message=live_activity_message(payload))


def render(delivery: Delivery, now_s: int) -> list[ApnsRequest]:
    """The APNs requests for one delivery (pure: unit tests check them against Apple's docs)."""
    if delivery.kind == "activity":
        return [activity_request(delivery)]
    config = delivery.config
    topic = str(config["topic"])
    collapse = apns_collapse_id(delivery.payload.get("collapse_id"))
    if delivery.kind == "notify":
        main = ApnsRequest(token=config["token"], topic=topic, push_type="alert", priority=10,
                           collapse_id=collapse, apns_id=apns_id(delivery.outbox_id, "alert"),
                           ttl_s=NOTIFY_TTL_S, message=fitted_alert(delivery.payload, collapse))
    else:
        message = {"aps": {"content-available": 1},
                   "maxclaw": {**delivery.payload, "apns_collapse_id": collapse}}
        main = ApnsRequest(token=config["token"], topic=topic, push_type="background",
                           priority=5, collapse_id=collapse,
                           apns_id=apns_id(delivery.outbox_id, "withdraw"), ttl_s=NOTIFY_TTL_S,
                           message=message)
    return [main]


def check_result(result: NotificationResult, *, device_token: bool = True) -> None:
    """Raise for an APNs error answer (status plus Apple's ``reason``). A 410 for the device
    token means the app is gone from the device; for a Live Activity token (``device_token``
    False) only that activity has ended: the token is dropped, the device stays."""
    if result.is_successful:
        return
    reason = result.description or "no reason given"
    message = f"APNs answered {result.status}: {reason}"
    retryable = result.status not in PERMANENT_STATUSES and (
        result.status != "403" or reason in RETRYABLE_403_REASONS)
    gone = result.status == "410"
    raise DeliveryError(message, retryable=retryable, device_gone=device_token and gone,
                        token_gone=not device_token and gone)


def _redirect(client: APNs, host: str, port: int) -> None:
    """Make the client's pool connect to ``host:port`` with Apple's name for SNI and checks.

    This replaces aioapns' ``_create_connection`` (a private method, stable from 2.x to 4.0);
    the integration test against the local fake fails if a release changes it.
    """
    pool: Any = client.pool

    async def create_connection(protocol_factory: Any) -> Any:
        _, protocol = await pool.loop.create_connection(
            protocol_factory, host=host, port=port, ssl=pool.ssl_context,
            server_hostname=pool.protocol_class.APNS_SERVER)
        return protocol

    pool._create_connection = create_connection


async def _quiet(request: NotificationRequest, result: NotificationResult) -> None:
    return None  # the dispatcher logs failures itself, with the outbox id


class ApnsAdapter:
    platform = "apns"

    def __init__(self, *, key_path: Path | None, key_id: str | None, team_id: str | None,
                 timeout_s: float = 15.0, ssl_context: ssl.SSLContext | None = None,
                 connect_to: tuple[str, int] | None = None) -> None:
        """``connect_to`` opens the TCP connection to another address while TLS still checks
        Apple's host name and HTTP/2 still says ``host: api…push.apple.com`` (tests point it
        at a local fake; aioapns' own proxy option fails on Python 3.11, see the docs)."""
        self.key_path = key_path
        self.key_id = key_id
        self.team_id = team_id
        self.timeout_s = timeout_s
        self.ssl_context = ssl_context
        self.connect_to = connect_to
        self._clients: dict[str, APNs] = {}

    def _key(self) -> str:
        if not (self.key_path and self.key_id and self.team_id):
            raise DeliveryError("APNs is not configured: set MAXCLAW_APNS_KEY_PATH, "
                                "MAXCLAW_APNS_KEY_ID and MAXCLAW_APNS_TEAM_ID", retryable=False)
        try:
            return self.key_path.read_text()
        except OSError as exc:
            raise DeliveryError(f"cannot read the APNs key {self.key_path}: {exc}",
                                retryable=False) from exc

    def client(self, environment: str, topic: str) -> APNs:
        """One HTTP/2 client per environment (the topic is set per request)."""
        if environment not in self._clients:
            from aioapns import APNs

            client = APNs(
                key=self._key(), key_id=self.key_id, team_id=self.team_id, topic=topic,
                use_sandbox=environment == "sandbox", max_connection_attempts=1,
                ssl_context=self.ssl_context, err_func=_quiet)
            if self.connect_to is not None:
                _redirect(client, *self.connect_to)
            self._clients[environment] = client
        return self._clients[environment]

    async def send(self, delivery: Delivery) -> None:
        """Send every request of this delivery; the first failure fails the delivery."""
        from aioapns import NotificationRequest, PushType
        from aioapns.exceptions import ConnectionClosed, MaxAttemptsExceeded
        from aioapns.exceptions import ConnectionError as ApnsConnectionError

        now_s = int(time.time())
        client = self.client(str(delivery.config.get("environment", "production")),
                             str(delivery.config["topic"]))
        for req in render(delivery, now_s):
            request = NotificationRequest(
                device_token=req.token, message=req.message, notification_id=req.apns_id,
                time_to_live=req.ttl_s, priority=req.priority, collapse_key=req.collapse_id,
                push_type=PushType(req.push_type), apns_topic=req.topic)
            try:
                result = await asyncio.wait_for(client.send_notification(request),
                                                self.timeout_s)
            except TimeoutError as exc:
                raise DeliveryError(f"APNs timed out after {self.timeout_s:g}s") from exc
            except (ApnsConnectionError, ConnectionClosed, MaxAttemptsExceeded, OSError) as exc:
                raise DeliveryError(f"APNs unreachable: {type(exc).__name__}") from exc
            check_result(result, device_token=req.push_type != "liveactivity")

    async def close(self) -> None:
        for client in self._clients.values():
            client.pool.close()
        self._clients.clear()
