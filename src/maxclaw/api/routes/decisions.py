"""User endpoints for the decisions panel."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query
from pydantic import BaseModel

from maxclaw.api.deps import Services, UserPrincipal
from maxclaw.api.responses import ERRORS
from maxclaw.wire.models import Decision, Decisions

router = APIRouter(prefix="/v1/decisions", responses=ERRORS)


class SettleBody(BaseModel):
    selected: Any = None
    text: Any = None


class SnoozeBody(BaseModel):
    minutes: Any = None


@router.get("", response_model=Decisions, response_model_exclude_unset=True)
async def list_decisions(who: UserPrincipal, services: Services, status: str = Query("open"),
                         limit: int = Query(100)) -> Decisions:
    return Decisions.model_validate(
        {"decisions": await services.decisions.list(who, status, limit)})


@router.post("/{decision_id}/settle", response_model=Decision,
             response_model_exclude_unset=True)
async def settle(decision_id: str, body: SettleBody, who: UserPrincipal,
                 services: Services) -> Decision:
    return Decision.model_validate(await services.decisions.settle(
        who, decision_id, body.selected, body.text, "decision"))


@router.post("/{decision_id}/snooze", response_model=Decision,
             response_model_exclude_unset=True)
async def snooze(decision_id: str, body: SnoozeBody, who: UserPrincipal,
                 services: Services) -> Decision:
    return Decision.model_validate(await services.decisions.snooze(who, decision_id,
                                                                   body.minutes))


@router.post("/{decision_id}/dismiss", response_model=Decision,
             response_model_exclude_unset=True)
async def dismiss(decision_id: str, who: UserPrincipal, services: Services) -> Decision:
    """Remove a settled item (an answer Main gave) from the panel; idempotent."""
    return Decision.model_validate(await services.decisions.dismiss(who, decision_id))
