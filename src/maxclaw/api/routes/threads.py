"""User endpoints: who am I, threads, and a thread's timeline."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, ConfigDict, Field

from maxclaw.api.deps import Services, UserPrincipal
from maxclaw.api.responses import ERRORS
from maxclaw.errors import Invalid
from maxclaw.search.service import MAX_QUERY_CHARS
from maxclaw.secrets.service import parse_ttl
from maxclaw.timeline.projections import thread_projection
from maxclaw.wire.models import (
    Me,
    MeSettings,
    Message,
    MessagePage,
    SearchPage,
    Thread,
    ThreadPatch,
    Threads,
)

router = APIRouter(prefix="/v1", responses=ERRORS)


class NewThread(BaseModel):
    model_config = ConfigDict(extra="ignore")
    title: str = Field(default="", max_length=500)
    kind: Literal["normal", "main", "isolated", "background"] = "normal"
    category: str | None = Field(default=None, max_length=200)


class NewMessage(BaseModel):
    body: str


@router.get("/me", response_model=Me, response_model_exclude_unset=True)
async def me(who: UserPrincipal, services: Services) -> Me:
    counts = await services.users.me(who.user_id)
    settings = services.settings
    return Me(user_id=who.user_id, name=who.name,
              main_thread_id=await services.auth.main_thread_id(who.user_id), **counts,
              settings=MeSettings(
                  secret_ttl_s=int(parse_ttl(settings.secret_ttl).total_seconds()),
                  presence_ttl_s=settings.presence_ttl_s,
                  search_max_query_chars=MAX_QUERY_CHARS))


@router.get("/threads", response_model=Threads, response_model_exclude_unset=True)
async def list_threads(who: UserPrincipal, services: Services, limit: int = Query(100),
                       archived: bool = Query(False)) -> Threads:
    return await services.timeline.list_threads(who, limit, archived)


@router.patch("/threads/{thread_id}", response_model=Thread,
              response_model_exclude_unset=True)
async def update_thread(thread_id: str, body: ThreadPatch, who: UserPrincipal,
                        services: Services) -> Thread:
    return await services.thread_housekeeping.update(
        who, thread_id, title=body.title, archived=body.archived,
        keep_cards_open=body.keep_cards_open)


@router.delete("/threads/{thread_id}", status_code=204, response_class=Response)
async def delete_thread(thread_id: str, who: UserPrincipal, services: Services,
                        confirm: str = Query("")) -> Response:
    # ``confirm`` repeats the thread's id: a stray DELETE (a client bug, a replayed request
    # for another thread) deletes nothing
    services.thread_housekeeping.check_confirmation(thread_id, confirm)
    await services.thread_housekeeping.delete(who, thread_id)
    return Response(status_code=204)


@router.get("/search", response_model=SearchPage, response_model_exclude_unset=True)
async def search(who: UserPrincipal, services: Services, q: str = Query(""),
                 cursor: str | None = Query(None), limit: int = Query(20)) -> SearchPage:
    return await services.search.search(who, q, cursor, limit)


@router.post("/threads", status_code=201, response_model=Thread,
             response_model_exclude_unset=True)
async def create_thread(body: NewThread, who: UserPrincipal, services: Services) -> Thread:
    return await services.timeline.create_thread(who, body.title, body.kind, body.category)


@router.get("/threads/{thread_id}", response_model=Thread, response_model_exclude_unset=True)
async def get_thread(thread_id: str, who: UserPrincipal, services: Services) -> Thread:
    return Thread.model_validate(
        thread_projection(await services.timeline.get_thread(who, thread_id)))


@router.get("/threads/{thread_id}/messages", response_model=MessagePage,
            response_model_exclude_unset=True)
async def list_messages(thread_id: str, who: UserPrincipal, services: Services,
                        after_id: int = Query(0), limit: int = Query(100),
                        before_id: int | None = Query(None, ge=1, le=2**63 - 1),
                        latest: bool = Query(False)) -> MessagePage:
    # a page ends at ``limit`` rows or its byte budget: next_after_id says where the next
    # one starts (null on the last one). ``latest`` reads the newest page and ``before_id``
    # the one before a message (backwards: prev_before_id says where the older one ends)
    if before_id is not None or latest:
        if after_id:
            raise Invalid.at(["query", "after_id"],
                             "after_id reads forwards: not with before_id or latest")
        if before_id is not None and latest:
            raise Invalid.at(["query", "before_id"], "send before_id or latest, not both")
        return await services.timeline.list_messages_before(who, thread_id, before_id, limit)
    return await services.timeline.list_messages_page(who, thread_id, after_id, limit)


@router.post("/threads/{thread_id}/messages", status_code=201, response_model=Message,
             response_model_exclude_unset=True)
async def post_message(thread_id: str, body: NewMessage, who: UserPrincipal,
                       services: Services) -> Message:
    return await services.timeline.post_user_message(who, thread_id, body.body)
