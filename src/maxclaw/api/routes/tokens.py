"""``/v1/tokens`` (a user's own API tokens), ``POST /v1/ws-ticket`` and the phone sign-in
codes (``/v1/signin/*``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from maxclaw.api.deps import Services, UserPrincipal
from maxclaw.api.responses import ERRORS
from maxclaw.auth.service import WEB_MINT_FORBIDDEN_MAIN
from maxclaw.errors import Forbidden, Invalid, MaxclawError
from maxclaw.web.qr import qr_svg
from maxclaw.wire.models import MintedToken, SigninCode, Ticket, Tokens

router = APIRouter(prefix="/v1", responses=ERRORS)
MAX_TOKEN_DAYS = 3650


class NewThreadTitle(BaseModel):
    model_config = ConfigDict(extra="ignore")
    title: str = Field(min_length=1, max_length=500)


class NewToken(BaseModel):
    """``POST /v1/tokens``: an agent token for one of the caller's threads, or a new one."""

    model_config = ConfigDict(extra="ignore")
    role: str = "agent"
    thread_id: str | None = None
    new_thread: NewThreadTitle | None = None
    name: str | None = Field(default=None, max_length=200)
    expires_in_days: float | None = Field(default=None, gt=0, le=MAX_TOKEN_DAYS)
    for_main: bool = False


class NewSigninCode(BaseModel):
    model_config = ConfigDict(extra="ignore")
    # the page's own origin (location.origin): the link and QR code lead back to it, also
    # behind a proxy that rewrites the Host header
    origin: str | None = Field(default=None, max_length=300)


class Redeem(BaseModel):
    model_config = ConfigDict(extra="ignore")
    code: str = Field(min_length=1, max_length=200)
    name: str | None = Field(default=None, max_length=200)  # the device, for the token list


@router.get("/tokens", response_model=Tokens, response_model_exclude_unset=True)
async def list_tokens(who: UserPrincipal, services: Services) -> Tokens:
    """The user's tokens (never the tokens themselves); ``current`` marks this one."""
    return await services.auth.list_tokens(who)


def _check_new_token(body: NewToken) -> None:
    """Refuse what the WebUI may not mint, before any row is written."""
    if body.role != "agent":
        raise Invalid.at(["body", "role"], "only agent tokens are minted here; a new device "
                         "signs in with a sign-in link (Sign in on your phone)")
    if body.for_main:
        raise Forbidden(WEB_MINT_FORBIDDEN_MAIN)


@router.post("/tokens", status_code=201, response_model=MintedToken,
             response_model_exclude_unset=True)
async def mint_token(body: NewToken, who: UserPrincipal, services: Services) -> MintedToken:
    """An agent token bound to one of the user's threads (or a new one), shown this once."""
    _check_new_token(body)
    expires_at = (datetime.now(UTC) + timedelta(days=body.expires_in_days)
                  if body.expires_in_days is not None else None)
    name = (body.name.strip() or None) if body.name is not None else None
    title = body.new_thread.title.strip() if body.new_thread is not None else None
    return await services.auth.mint_agent_token(who, body.thread_id, new_thread_title=title,
                                                name=name, expires_at=expires_at)


@router.delete("/tokens/{token_id}", status_code=204)
async def revoke_token(token_id: str, who: UserPrincipal, services: Services) -> Response:
    """Revoke one of the user's tokens: refused at once on every replica, its sockets closed."""
    await services.auth.revoke_token(who, token_id)
    return Response(status_code=204)


@router.post("/ws-ticket", response_model=Ticket, response_model_exclude_unset=True)
async def ws_ticket(who: UserPrincipal, services: Services) -> Ticket:
    """A single-use ticket for ``/v1/ws?ticket=`` (valid 30 s)."""
    return await services.auth.issue_ticket(who)


def _origin(body: NewSigninCode | None, request: Request) -> str:
    """Where the sign-in link leads: the page's origin when it sent one, else this server."""
    if body is None or not body.origin:
        return str(request.base_url).rstrip("/")
    parts = urlsplit(body.origin)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.path not in ("", "/"):
        raise Invalid.at(["body", "origin"], "origin must be a page's origin, such as "
                         "https://maxclaw.example.com")
    return f"{parts.scheme}://{parts.netloc}"


@router.post("/signin/codes", status_code=201, response_model=SigninCode,
             response_model_exclude_unset=True)
async def signin_code(request: Request, who: UserPrincipal, services: Services,
                      body: NewSigninCode | None = None) -> SigninCode:
    """A one-time sign-in link for another device (single use, five minutes), with its QR."""
    origin = _origin(body, request)
    code = await services.auth.issue_signin_code(who)
    url = f"{origin}/#signin={code.code}"
    return SigninCode(code=code.code, expires_at=code.expires_at, url=url, qr_svg=qr_svg(url))


@router.post("/signin/redeem", status_code=201, response_model=MintedToken,
             response_model_exclude_unset=True)
async def redeem_signin(body: Redeem, request: Request, services: Services) -> MintedToken:
    """A sign-in code for a new user token (no bearer token: the code is the credential). A
    refused code, unknown, used or expired, counts against the address like a refused token."""
    address = request.client.host if request.client else None
    quotas = services.quotas
    try:
        return await services.auth.redeem_signin_code(body.code, body.name)
    except MaxclawError as exc:
        if exc.http_status in (401, 409):
            quotas.check_auth(address)
            quotas.auth_failed(address)
        raise

