"""User endpoints: who am I, threads, and a thread's timeline."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from maxclaw.api.deps import Services, UserPrincipal
from maxclaw.timeline.projections import thread_projection

router = APIRouter(prefix="/v1")


class NewThread(BaseModel):
    model_config = ConfigDict(extra="ignore")
    title: str = Field(default="", max_length=500)
    kind: Literal["normal", "main", "isolated", "background"] = "normal"
    category: str | None = Field(default=None, max_length=200)


class NewMessage(BaseModel):
    body: str


@router.get("/me")
async def me(who: UserPrincipal, services: Services) -> dict[str, Any]:
    return {"user_id": who.user_id, "name": who.name,
            "main_thread_id": await services.auth.main_thread_id(who.user_id)}


@router.get("/threads")
async def list_threads(who: UserPrincipal, services: Services,
                       limit: int = Query(100)) -> dict[str, Any]:
    return {"threads": await services.timeline.list_threads(who, limit)}


@router.post("/threads", status_code=201)
async def create_thread(body: NewThread, who: UserPrincipal, services: Services) -> dict[str, Any]:
    thread: dict[str, Any] = await services.timeline.create_thread(who, body.title, body.kind,
                                                                   body.category)
    return thread


@router.get("/threads/{thread_id}")
async def get_thread(thread_id: str, who: UserPrincipal, services: Services) -> dict[str, Any]:
    return thread_projection(await services.timeline.get_thread(who, thread_id))


@router.get("/threads/{thread_id}/messages")
async def list_messages(thread_id: str, who: UserPrincipal, services: Services,
                        after_id: int = Query(0), limit: int = Query(100)) -> dict[str, Any]:
    # next_after_id (added): where the next page starts, null on the last one; a page ends at
    # ``limit`` rows or its byte budget
    page: dict[str, Any] = await services.timeline.list_messages_page(who, thread_id, after_id,
                                                                      limit)
    return page


@router.post("/threads/{thread_id}/messages", status_code=201)
async def post_message(thread_id: str, body: NewMessage, who: UserPrincipal,
                       services: Services) -> dict[str, Any]:
    message: dict[str, Any] = await services.timeline.post_user_message(who, thread_id, body.body)
    return message
