"""Unauthenticated probes, and metrics (for this host or a metrics token)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from maxclaw.api.deps import services_of
from maxclaw.ops.metrics_http import check_api_port_access, exposition

router = APIRouter()


@router.get("/healthz", include_in_schema=False)
async def healthz() -> dict[str, str]:
    """The process answers."""
    return {"status": "ok"}


@router.get("/readyz", include_in_schema=False)
async def readyz(request: Request) -> JSONResponse:
    """200 when a database round trip succeeds, 503 otherwise."""
    if await services_of(request).db.ping():
        return JSONResponse({"status": "ready"})
    return JSONResponse({"code": "unavailable", "message": "The database does not answer.",
                         "data": {}}, status_code=503)


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    """The Prometheus exposition, to this host, a metrics token, or nobody (its own port):
    ``maxclaw.ops.metrics_http``."""
    services = services_of(request)
    check_api_port_access(services.settings, request.client.host if request.client else None,
                          request.headers.get("authorization", ""))
    return await exposition(services.metrics, services.ops.gauges)
