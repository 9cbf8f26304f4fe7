"""User endpoints for the decisions panel."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query
from fastapi.encoders import jsonable_encoder
from pydantic import BaseModel

from maxclaw.api.deps import Services, UserPrincipal

router = APIRouter(prefix="/v1/decisions")


class SettleBody(BaseModel):
    selected: Any = None
    text: Any = None


class SnoozeBody(BaseModel):
    minutes: Any = None


@router.get("")
async def list_decisions(who: UserPrincipal, services: Services, status: str = Query("open"),
                         limit: int = Query(100)) -> dict[str, Any]:
    return {"decisions": jsonable_encoder(await services.decisions.list(who, status, limit))}


@router.post("/{decision_id}/settle")
async def settle(decision_id: str, body: SettleBody, who: UserPrincipal,
                 services: Services) -> Any:
    return jsonable_encoder(await services.decisions.settle(who, decision_id, body.selected,
                                                            body.text, "decision"))


@router.post("/{decision_id}/snooze")
async def snooze(decision_id: str, body: SnoozeBody, who: UserPrincipal,
                 services: Services) -> Any:
    return jsonable_encoder(await services.decisions.snooze(who, decision_id, body.minutes))


@router.post("/{decision_id}/dismiss")
async def dismiss(decision_id: str, who: UserPrincipal, services: Services) -> Any:
    """Remove a settled item (an answer Main gave) from the panel; idempotent."""
    return jsonable_encoder(await services.decisions.dismiss(who, decision_id))
