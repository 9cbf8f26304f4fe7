"""Agent endpoints outside a turn (MCP hosts, command hooks): a new thread, a thread's inbox,
a thread's cards."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Query
from fastapi.encoders import jsonable_encoder
from pydantic import BaseModel, ConfigDict, Field

from maxclaw.api.deps import AgentPrincipal, Services

router = APIRouter(prefix="/v1/agent")


class NewAgentThread(BaseModel):
    model_config = ConfigDict(extra="ignore")
    title: str = Field(default="", max_length=500)
    kind: Literal["normal", "isolated", "background"] = "normal"


@router.post("/threads", status_code=201)
async def create_thread(body: NewAgentThread, who: AgentPrincipal,
                        services: Services) -> dict[str, Any]:
    thread: dict[str, Any] = await services.agent_threads.create_thread(who, body.title,
                                                                        body.kind)
    return thread


@router.post("/threads/{thread_id}/inbox")
async def thread_inbox(thread_id: str, who: AgentPrincipal, services: Services) -> dict[str, Any]:
    result: dict[str, Any] = await services.agent_threads.inbox(who, thread_id)
    return result


@router.get("/threads/{thread_id}/components")
async def thread_components(thread_id: str, who: AgentPrincipal, services: Services,
                            limit: int = Query(100)) -> Any:
    # encoded as GET /v1/components/{id} encodes a Component, so the two read the same
    return jsonable_encoder(await services.agent_threads.components(who, thread_id, limit))
