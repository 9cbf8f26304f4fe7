"""Attach push to the container: the service, and the dispatcher as a background job."""

from __future__ import annotations

from maxclaw.container import Services


def register(services: Services) -> None:
    """``services.push``; the dispatcher runs inside ``serve`` when ``run_push_dispatcher``."""
    from maxclaw.push.service import PushService

    services.push = PushService(services)
    if services.settings.run_push_dispatcher:
        services.jobs.append(services.push.dispatcher)
