"""``create_app(settings)``: the whole service as one ASGI app."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from maxclaw import tracing
from maxclaw.api.errors import install_error_handlers
from maxclaw.api.lean import install_lean_routes
from maxclaw.api.middleware import AccessLog, BodyGuard
from maxclaw.api.requestid import RequestId
from maxclaw.api.responses import document_error_body
from maxclaw.api.routes import ROUTERS
from maxclaw.composition import Services, build_services
from maxclaw.jobs import Job
from maxclaw.metrics import Metrics
from maxclaw.ops.services import database_for
from maxclaw.settings import Settings

log = logging.getLogger("maxclaw")


def create_app(settings: Settings) -> FastAPI:
    """Build the app; the database pool opens (and background jobs start) in its lifespan."""
    if not settings.database_url:
        raise ValueError("create_app needs settings.database_url (serve resolves the embedded one)")
    metrics = Metrics()
    db = database_for(settings)
    services = build_services(settings, db, metrics)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await db.open()
        started: list[Job] = []
        try:
            for job in services.jobs:
                await job.start()
                started.append(job)
            yield
        finally:
            for job in reversed(started):
                try:
                    await job.stop()
                except Exception:
                    log.exception("job failed to stop", extra={"kind": job.name})
            await db.close()

    # FastAPI's built-in telemetry, left unconfigured, asks OpenTelemetry for its providers on
    # every request (~3% of an answer's CPU, bench/variants.py); we export Prometheus instead
    # docs_url/redoc_url off: FastAPI's pages load Swagger UI/ReDoc from a CDN with an inline
    # script; /docs is served from the package under the WebUI's CSP (web/apidocs.py)
    app = FastAPI(title="MaxClaw", version="0.1.0", lifespan=lifespan,
                  telemetry={"tracing": False, "metrics": False, "logs": False},
                  docs_url=None, redoc_url=None)
    # the one thing on the app's state: read it typed, through ``services_of``
    app.state.services = services
    install_error_handlers(app)
    document_error_body(app)
    # Starlette serves a route whose endpoint is not a function as a plain ASGI app
    app.router.add_route("/mcp", services.mcp_http,  # type: ignore[arg-type]
                         include_in_schema=False)
    for router in ROUTERS:
        app.include_router(router)
    # the agent's round trip and the claim, ahead of the routers (api/lean.py)
    if settings.lean_routes:
        install_lean_routes(app)
    app.add_middleware(BodyGuard, max_bytes=settings.max_body_bytes)
    app.add_middleware(AccessLog, metrics=metrics)
    if settings.tracing:  # opt-in OpenTelemetry (maxclaw.tracing)
        tracing.enable()
        app.add_middleware(tracing.HttpTracing)
    # outside Starlette's error middleware too, so an unexpected error's response and log
    # line name the request like every other
    inner = app.build_middleware_stack
    app.build_middleware_stack = lambda: RequestId(inner())  # type: ignore[method-assign]
    return app


def services_of(app: FastAPI) -> Services:
    services: Services = app.state.services
    return services
