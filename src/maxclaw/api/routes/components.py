"""User endpoints for cards: read, answer, let Main decide, revoke."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel

from maxclaw.api.deps import Services, UserPrincipal
from maxclaw.api.encode import json_ready

router = APIRouter(prefix="/v1/components")


class AnswerBody(BaseModel):
    selected: Any = None
    text: Any = None


@router.get("/{component_id}")
async def get_component(component_id: str, who: UserPrincipal,
                        services: Services) -> Any:
    return json_ready(await services.components.get(who, component_id))


@router.post("/{component_id}/answer")
async def answer(component_id: str, body: AnswerBody, who: UserPrincipal,
                 services: Services) -> Any:
    return json_ready(await services.components.answer(who, component_id, body.selected,
                                                       body.text, "card"))


@router.post("/{component_id}/to-main")
async def to_main(component_id: str, who: UserPrincipal, services: Services) -> Any:
    return json_ready(await services.components.to_main(who, component_id))


@router.post("/{component_id}/revoke")
async def revoke(component_id: str, who: UserPrincipal, services: Services) -> Any:
    return json_ready(await services.components.revoke(who, component_id))
