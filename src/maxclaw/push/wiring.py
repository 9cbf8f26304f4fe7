"""Attach push to the container: the service, and the dispatcher as a background job."""

from __future__ import annotations

from maxclaw.container import Services


class _CloseAdapters:
    """With the dispatcher off (tests, API-only replicas), still release the adapters'
    connections at shutdown, in case something drove the dispatcher by hand."""

    name = "push-adapters"

    def __init__(self, services: Services) -> None:
        self.services = services

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        await self.services.push.dispatcher.close()


def register(services: Services) -> None:
    """``services.push``; the dispatcher runs inside ``serve`` when ``run_push_dispatcher``."""
    from maxclaw.push.service import PushService

    services.push = PushService(services)
    if services.settings.run_push_dispatcher:
        services.jobs.append(services.push.dispatcher)
    else:
        services.jobs.append(_CloseAdapters(services))
