"""User endpoints for cards: read, answer, let Main decide, revoke, take back."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel

from maxclaw.api.deps import Services, UserPrincipal
from maxclaw.api.responses import ERRORS
from maxclaw.wire.models import Component

router = APIRouter(prefix="/v1/components", responses=ERRORS)


class AnswerBody(BaseModel):
    selected: Any = None
    text: Any = None


@router.get("/{component_id}", response_model=Component, response_model_exclude_unset=True)
async def get_component(component_id: str, who: UserPrincipal,
                        services: Services) -> Component:
    return Component.model_validate(await services.components.get(who, component_id))


@router.post("/{component_id}/answer", response_model=Component,
             response_model_exclude_unset=True)
async def answer(component_id: str, body: AnswerBody, who: UserPrincipal,
                 services: Services) -> Component:
    return Component.model_validate(await services.components.answer(
        who, component_id, body.selected, body.text, "card"))


@router.post("/{component_id}/to-main", response_model=Component,
             response_model_exclude_unset=True)
async def to_main(component_id: str, who: UserPrincipal, services: Services) -> Component:
    return Component.model_validate(await services.components.to_main(who, component_id))


@router.post("/{component_id}/revoke", response_model=Component,
             response_model_exclude_unset=True)
async def revoke(component_id: str, who: UserPrincipal, services: Services) -> Component:
    return Component.model_validate(await services.components.revoke(who, component_id))


@router.post("/{component_id}/retract", response_model=Component,
             response_model_exclude_unset=True)
async def retract(component_id: str, who: UserPrincipal, services: Services) -> Component:
    return Component.model_validate(await services.components.retract(who, component_id))
