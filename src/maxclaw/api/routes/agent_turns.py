"""Agent endpoints for turns: claim (long-poll), heartbeat, inbox, finish, and history."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse

from maxclaw.api.deps import AgentPrincipal, Services
from maxclaw.api.encode import json_ready
from maxclaw.api.responses import ERRORS
from maxclaw.turns.service import parse_turn_id
from maxclaw.wire.models import Claim, ClaimRequest, Delivery, Finished, History, Lease

router = APIRouter(prefix="/v1/agent", responses=ERRORS)


# Model-facing messages go out as the service built them: ``ChatMessage`` keeps only the
# Chat Completions keys (a runtime parses with it and ignores the rest), so serialising
# through it could drop a key. ``responses`` documents the models; the body is sent as
# ``json_ready`` makes it (what FastAPI would send, without its encoder's walk over the
# claim's window, the biggest body the API sends).
@router.post("/turns/claim", response_model=None,
             responses={200: {"model": Claim},
                        204: {"description": "No turn was queued within wait_s."}})
async def claim(request: Request, who: AgentPrincipal, services: Services,
                body: ClaimRequest | None = None) -> Any:
    body = body or ClaimRequest()

    async def still_wanted() -> bool:
        return not await request.is_disconnected()

    with services.quotas.claim(who.token_id if who.token_id is not None else who.user_id):
        claimed = await services.turns.claim(who, body.wait_s, body.runtime_id, still_wanted,
                                              body.thread_ids)
    if claimed is None:
        return Response(status_code=204)
    return JSONResponse(json_ready(claimed))


# lease_until goes out as FastAPI's encoder writes a datetime (``+00:00``), as it always has;
# through ``Lease`` it would read ``Z`` (the same instant, other bytes)
@router.post("/turns/{turn_id}/heartbeat", response_model=None, responses={200: {"model": Lease}})
async def heartbeat(turn_id: str, who: AgentPrincipal, services: Services) -> JSONResponse:
    return JSONResponse(json_ready(await services.turns.heartbeat(who, parse_turn_id(turn_id))))


@router.post("/turns/{turn_id}/inbox", response_model=None,
             responses={200: {"model": Delivery}})
async def inbox(turn_id: str, who: AgentPrincipal, services: Services) -> JSONResponse:
    return JSONResponse(json_ready(await services.turns.inbox(who, parse_turn_id(turn_id))))


@router.post("/turns/{turn_id}/finish", response_model=Finished,
             response_model_exclude_unset=True)
async def finish(turn_id: str, who: AgentPrincipal, services: Services) -> Finished:
    return await services.turns.finish(who, parse_turn_id(turn_id))


@router.get("/threads/{thread_id}/history", response_model=None,
            responses={200: {"model": History}})
async def history(thread_id: str, who: AgentPrincipal, services: Services,
                  before_id: int | None = Query(None, ge=1, le=2**63 - 1)) -> JSONResponse:
    # the model window is capped (docs/rich-message.md): a page's next_before_id reads the
    # page before it, null on the oldest one
    return JSONResponse(json_ready(await services.turns.history(who, thread_id, before_id)))
