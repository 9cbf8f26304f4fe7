"""User endpoint: Max's Stop beside "running" (issue 30, item 2)."""

from __future__ import annotations

from fastapi import APIRouter

from maxclaw.api.deps import Services, UserPrincipal
from maxclaw.api.responses import ERRORS
from maxclaw.wire.models import StoppedTurn

router = APIRouter(prefix="/v1", responses=ERRORS)


@router.post("/threads/{thread_id}/turn/stop", response_model=StoppedTurn)
async def stop_turn(thread_id: str, who: UserPrincipal, services: Services) -> StoppedTurn:
    return await services.turns.stop(who, thread_id)
