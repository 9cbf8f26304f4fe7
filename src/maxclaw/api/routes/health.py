"""Unauthenticated probes and metrics."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from maxclaw.api.deps import services_of

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
    """Prometheus exposition of this process's counters and histograms, and of the database
    gauges (read now unless they were read moments ago)."""
    await request.app.state.ops.gauges.refresh()
    return Response(generate_latest(request.app.state.metrics.registry),
                    media_type=CONTENT_TYPE_LATEST)
