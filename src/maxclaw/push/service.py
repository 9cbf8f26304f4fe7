"""Push: the package's face for the rest of the server — the devices (``devices.py``), the
adapters, the dispatcher job and the action tokens notifications carry.

Answering from a notification is not here: push knows nothing of cards or decisions' settling.
``surfaces/push_actions.py`` sits above components, decisions and push, and calls down.
"""

from __future__ import annotations

from maxclaw.db.database import Database
from maxclaw.push.action_tokens import ActionTokens
from maxclaw.push.adapters.apns import ApnsAdapter
from maxclaw.push.adapters.base import Adapter
from maxclaw.push.adapters.http import HttpSender
from maxclaw.push.adapters.log import LogAdapter
from maxclaw.push.adapters.webhook import WebhookAdapter
from maxclaw.push.adapters.webpush import WebPushAdapter
from maxclaw.push.devices import Devices
from maxclaw.push.dispatcher import Dispatcher
from maxclaw.settings import Settings

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


class PushService:
    """Devices for user clients (``devices.Devices``, whose methods it hands on), the adapters
    with their action tokens, and the dispatcher job."""

    def __init__(self, db: Database, settings: Settings, *, adapters: dict[str, Adapter],
                 action_tokens: ActionTokens, dispatcher: Dispatcher) -> None:
        """``adapters`` are the dispatcher's (stamped with action tokens); the composition root
        builds all three (``composition.build_push``)."""
        self.db = db
        self.settings = settings
        self.adapters = adapters
        self.action_tokens = action_tokens
        self.dispatcher = dispatcher
        self.devices = Devices(db, settings)
        self.register_device = self.devices.register_device
        self.list_devices = self.devices.list_devices
        self.delete_device = self.devices.delete_device
        self.send_test = self.devices.send_test
        self.client_config = self.devices.client_config


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
