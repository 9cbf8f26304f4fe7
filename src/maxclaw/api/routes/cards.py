"""User endpoint for a whole card: several questions answered in one request, one message."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.encoders import jsonable_encoder
from pydantic import BaseModel

from maxclaw.api.deps import Services, UserPrincipal

router = APIRouter(prefix="/v1/cards")


class CardAnswerBody(BaseModel):
    # validated by the service, so every error names its question (body.answers.<qid>…)
    answers: Any = None


@router.post("/{tool_call_id}/answer")
async def answer_card(tool_call_id: str, body: CardAnswerBody, who: UserPrincipal,
                      services: Services) -> Any:
    return jsonable_encoder(await services.components.answer_card(who, tool_call_id,
                                                                  body.answers))
