"""Attach the WebSocket hub; its LISTEN connection and pump run inside ``serve``."""

from __future__ import annotations

from maxclaw.container import Services
from maxclaw.realtime import logfilter
from maxclaw.realtime.hub import RealtimeHub


def register(services: Services) -> None:
    """``services.realtime`` always exists (sockets catch up without it); the job runs when
    ``settings.run_listener`` is on, which ``serve`` leaves on and tests turn on explicitly."""
    settings = services.settings
    hub = RealtimeHub(services.db, poll_s=settings.realtime_poll_s,
                      registry=services.metrics.registry)
    services.realtime = hub
    if settings.run_listener:
        services.jobs.append(hub)
    logfilter.install()
