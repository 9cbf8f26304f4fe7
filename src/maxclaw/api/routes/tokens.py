"""``/v1/tokens`` (a user's own API tokens) and ``POST /v1/ws-ticket``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response

from maxclaw.api.deps import Services, UserPrincipal

router = APIRouter(prefix="/v1")


@router.get("/tokens")
async def list_tokens(who: UserPrincipal, services: Services) -> dict[str, Any]:
    """The user's tokens (never the tokens themselves); ``current`` marks this one."""
    return {"tokens": await services.auth.list_tokens(who)}


@router.delete("/tokens/{token_id}", status_code=204)
async def revoke_token(token_id: str, who: UserPrincipal, services: Services) -> Response:
    """Revoke one of the user's tokens: refused at once on every replica, its sockets closed."""
    await services.auth.revoke_token(who, token_id)
    return Response(status_code=204)


@router.post("/ws-ticket")
async def ws_ticket(who: UserPrincipal, services: Services) -> dict[str, Any]:
    """A single-use ticket for ``/v1/ws?ticket=`` (valid 30 s)."""
    return await services.auth.issue_ticket(who)
