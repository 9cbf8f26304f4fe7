"""Agent endpoints of the Cards issue: tools, writing rows, executing service tools."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Query
from fastapi.responses import JSONResponse

from maxclaw.api.deps import AgentPrincipal, Services

router = APIRouter(prefix="/v1/agent")


@router.get("/tools")
async def tools(who: AgentPrincipal, services: Services,
                thread_id: str | None = Query(None)) -> dict[str, Any]:
    return {"tools": await services.tools.tools(who, thread_id)}


@router.post("/threads/{thread_id}/messages", status_code=201)
async def post_message(thread_id: str, who: AgentPrincipal, services: Services,
                       body: dict[str, Any] = Body(...)) -> dict[str, Any]:
    result: dict[str, Any] = await services.agent_messages.post(who, thread_id, body)
    return result


@router.post("/threads/{thread_id}/tool-calls/{tool_call_id}/execute")
async def execute(thread_id: str, tool_call_id: str, who: AgentPrincipal,
                  services: Services) -> JSONResponse:
    status, content, error = await services.tools.execute(who, thread_id, tool_call_id)
    if status == 200:
        return JSONResponse({"tool_call_id": tool_call_id, "content": content})
    return JSONResponse({**(error or {}), "tool_call_id": tool_call_id, "content": content},
                        status_code=status)
