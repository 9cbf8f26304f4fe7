"""Agent endpoints outside a turn (MCP hosts, command hooks): a new thread, a thread's inbox,
a thread's cards."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from maxclaw.api.deps import AgentPrincipal, Services
from maxclaw.api.encode import json_ready
from maxclaw.api.responses import ERRORS
from maxclaw.wire.models import Components, Delivery, Thread

router = APIRouter(prefix="/v1/agent", responses=ERRORS)


class NewAgentThread(BaseModel):
    model_config = ConfigDict(extra="ignore")
    title: str = Field(default="", max_length=500)
    kind: Literal["normal", "isolated", "background"] = "normal"


@router.post("/threads", status_code=201, response_model=Thread,
             response_model_exclude_unset=True)
async def create_thread(body: NewAgentThread, who: AgentPrincipal, services: Services) -> Thread:
    return await services.agent_threads.create_thread(who, body.title, body.kind)


# model-facing messages are sent as the service built them (``agent_turns.py`` says why)
@router.post("/threads/{thread_id}/inbox", response_model=None,
             responses={200: {"model": Delivery}})
async def thread_inbox(thread_id: str, who: AgentPrincipal,
                       services: Services) -> JSONResponse:
    return JSONResponse(json_ready(await services.agent_threads.inbox(who, thread_id)))


@router.get("/threads/{thread_id}/components", response_model=Components,
            response_model_exclude_unset=True)
async def thread_components(thread_id: str, who: AgentPrincipal, services: Services,
                            limit: int = Query(100)) -> Components:
    return await services.agent_threads.components(who, thread_id, limit)
