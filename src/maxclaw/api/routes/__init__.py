"""One router per concept; ``ROUTERS`` is the order ``create_app`` mounts them in."""

from fastapi import APIRouter

from maxclaw.api.routes import (
    agent,
    agent_threads,
    agent_turns,
    cards,
    components,
    decisions,
    health,
    push,
    threads,
    tokens,
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
    agent_threads.router,
    tokens.router,
    ws.router,
    web.router,  # last: it serves the WebUI at "/"
]
