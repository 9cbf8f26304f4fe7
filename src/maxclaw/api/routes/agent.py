"""Agent endpoints of the Cards issue: tools, writing rows, executing service tools."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Query
from fastapi.responses import JSONResponse

from maxclaw.api.deps import AgentPrincipal, Services
from maxclaw.api.responses import ERRORS
from maxclaw.wire.models import Executed, ExecuteRefused, Posted, Tools

router = APIRouter(prefix="/v1/agent", responses=ERRORS)


@router.get("/tools", response_model=Tools, response_model_exclude_unset=True)
async def tools(who: AgentPrincipal, services: Services,
                thread_id: str | None = Query(None)) -> Tools:
    return Tools.model_validate({"tools": await services.tools.tools(who, thread_id)})


@router.post("/threads/{thread_id}/messages", status_code=201, response_model=Posted,
             response_model_exclude_unset=True)
async def post_message(thread_id: str, who: AgentPrincipal, services: Services,
                       body: dict[str, Any] = Body(...)) -> Posted:
    return Posted.model_validate(await services.agent_messages.post(who, thread_id, body))


# the endpoint answers a refusal with its own status and body (the tool row it wrote), so it
# builds its responses; ``responses`` describes both
@router.post("/threads/{thread_id}/tool-calls/{tool_call_id}/execute", response_model=None,
             responses={200: {"model": Executed},
                        **{status: {"model": ExecuteRefused,
                                    "description": ERRORS[status]["description"]}
                           for status in (403, 409, 422)}})
async def execute(thread_id: str, tool_call_id: str, who: AgentPrincipal,
                  services: Services) -> JSONResponse:
    status, content, error = await services.tools.execute(who, thread_id, tool_call_id)
    if status == 200:
        return JSONResponse({"tool_call_id": tool_call_id, "content": content})
    return JSONResponse({**(error or {}), "tool_call_id": tool_call_id, "content": content},
                        status_code=status)
