"""User endpoint for a whole card: several questions answered in one request, one message."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel

from maxclaw.api.deps import Services, UserPrincipal
from maxclaw.api.responses import ERRORS
from maxclaw.wire.models import CardAnswers

router = APIRouter(prefix="/v1/cards", responses=ERRORS)


class CardAnswerBody(BaseModel):
    # validated by the service, so every error names its question (body.answers.<qid>…)
    answers: Any = None


@router.post("/{tool_call_id}/answer", response_model=CardAnswers,
             response_model_exclude_unset=True)
async def answer_card(tool_call_id: str, body: CardAnswerBody, who: UserPrincipal,
                      services: Services) -> CardAnswers:
    return CardAnswers.model_validate(await services.components.answer_card(
        who, tool_call_id, body.answers))
