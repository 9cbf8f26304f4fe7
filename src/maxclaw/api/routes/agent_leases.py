"""Agent endpoints for runtime leases: take one, heartbeat it (leases/service.py)."""

from __future__ import annotations

from fastapi import APIRouter

from maxclaw.api.deps import AgentPrincipal, Services
from maxclaw.api.responses import ERRORS
from maxclaw.wire.models import LeaseRequest, RuntimeLease

router = APIRouter(prefix="/v1/agent", responses=ERRORS)


@router.post("/leases", status_code=201, response_model=RuntimeLease)
async def create_lease(body: LeaseRequest, who: AgentPrincipal,
                       services: Services) -> RuntimeLease:
    return await services.leases.create(who, body.runtime)


@router.post("/leases/{lease_id}/heartbeat", response_model=RuntimeLease)
async def heartbeat_lease(lease_id: str, who: AgentPrincipal,
                          services: Services) -> RuntimeLease:
    return await services.leases.heartbeat(who, lease_id)
