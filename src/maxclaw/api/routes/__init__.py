"""One router per concept; ``ROUTERS`` is the order ``create_app`` mounts them in."""

from fastapi import APIRouter

from maxclaw.api.routes import (
    agent,
    agent_leases,
    agent_threads,
    agent_turns,
    cards,
    components,
    decisions,
    health,
    push,
    settings,
    threads,
    tokens,
    turn_stop,
    web,
    ws,
)

ROUTERS: list[APIRouter] = [
    health.router,
    threads.router,
    components.router,
    cards.router,
    decisions.router,
    push.router,
    agent.router,
    agent_turns.router,
    agent_leases.router,
    agent_threads.router,
    tokens.router,
    turn_stop.router,
    settings.router,
    ws.router,
    web.router,  # last: it serves the WebUI at "/"
]
