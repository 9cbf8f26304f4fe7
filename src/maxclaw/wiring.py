"""Where each capability plugs its services and background jobs into the container.

Kept in one file so the order of construction is visible: components need decisions and push
hooks; realtime and the agent runtime read what the others write.
"""

from __future__ import annotations

from maxclaw.container import Services


def register_capabilities(services: Services) -> None:
    """Attach every capability's service objects and jobs to ``services``."""
    from maxclaw.agent import wiring as agent
    from maxclaw.components import wiring as components
    from maxclaw.push import wiring as push
    from maxclaw.realtime import wiring as realtime
    from maxclaw.web import wiring as web

    components.register(services)  # components, decisions, presence, the sweeper
    push.register(services)  # push outbox dispatcher
    realtime.register(services)  # WebSocket hub and its LISTEN connection
    agent.register(services)  # turns, inbox
    web.register(services)  # the WebUI's static files
