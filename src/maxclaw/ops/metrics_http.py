"""``/metrics``: who may read it, and its own port (``MAXCLAW_METRICS_PORT``).

Per-route counters reveal other tenants' activity, so the exposition is not public on the API
port: it answers a peer on this host (a Prometheus next to the service, a port-forward), or,
when ``MAXCLAW_METRICS_TOKEN`` is set, that bearer token alone. With ``MAXCLAW_METRICS_PORT``
it is served on a port of its own (bound to ``MAXCLAW_HOST``, for a scraper inside the
cluster network) and the API port answers 404.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
from collections.abc import Generator

import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from maxclaw.errors import Forbidden, NotFound, Unauthorized
from maxclaw.metrics import Metrics
from maxclaw.ops.gauges import DatabaseGauges
from maxclaw.settings import Settings

STARTED_WITHIN_S = 10.0


async def exposition(metrics: Metrics, gauges: DatabaseGauges) -> Response:
    """Prometheus exposition of this process's counters and histograms, and of the database
    gauges (read now unless they were read moments ago)."""
    await gauges.refresh()
    return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)


def check_api_port_access(settings: Settings, peer: str | None, authorization: str) -> None:
    """Raise unless this request may read ``/metrics`` on the API port."""
    if settings.metrics_port is not None:
        raise NotFound(f"/metrics is served on port {settings.metrics_port}.")
    if settings.metrics_token:
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
                token.strip().encode(), settings.metrics_token.encode()):
            raise Unauthorized("/metrics needs 'Authorization: Bearer <MAXCLAW_METRICS_TOKEN>'.")
        return
    if not _loopback(peer):
        raise Forbidden("/metrics answers this host only: set MAXCLAW_METRICS_TOKEN and scrape "
                        "with it, or MAXCLAW_METRICS_PORT to serve it on a port of its own.")


def _loopback(peer: str | None) -> bool:
    try:
        return peer is not None and ipaddress.ip_address(peer).is_loopback
    except ValueError:
        return False


class _QuietServer(uvicorn.Server):
    """A second server in ``serve``'s process: the main server owns the signals."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


class MetricsServer:
    """A job of ``serve``'s lifespan: ``/metrics`` alone on ``MAXCLAW_METRICS_PORT``."""

    name = "metrics-http"

    def __init__(self, settings: Settings, metrics: Metrics, gauges: DatabaseGauges) -> None:
        async def endpoint(request: Request) -> Response:
            return await exposition(metrics, gauges)

        app = Starlette(routes=[Route("/metrics", endpoint)])
        assert settings.metrics_port is not None
        self.server = _QuietServer(uvicorn.Config(
            app, host=settings.host, port=settings.metrics_port, log_config=None,
            lifespan="off", access_log=False))
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self.server.serve(), name=self.name)
        deadline = asyncio.get_running_loop().time() + STARTED_WITHIN_S
        # uvicorn offers no event for "listening"; its flag, polled until the deadline
        while not self.server.started:
            if self._task.done():
                self._task.result()
                raise RuntimeError(f"the metrics port {self.server.config.port} did not open")
            if asyncio.get_running_loop().time() > deadline:
                raise RuntimeError(f"the metrics port {self.server.config.port} did not open")
            await asyncio.sleep(0.02)

    async def stop(self) -> None:
        if self._task is not None:
            self.server.should_exit = True
            await self._task
            self._task = None
