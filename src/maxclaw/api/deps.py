"""Dependencies as ``Annotated`` aliases: the caller, by role, and the services."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from starlette.requests import HTTPConnection

from maxclaw.auth.service import Principal
from maxclaw.composition import Services as ServiceSet
from maxclaw.errors import Unauthorized


def bearer_token(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


# the scope key under which BodyGuard (api/middleware.py) leaves the caller it authenticated
# from the headers, before reading the body
PRINCIPAL = "maxclaw.principal"


async def _principal(request: Request) -> Principal:
    known: Principal | None = request.scope.get(PRINCIPAL)
    if known is not None:
        return known
    services = services_of(request)
    address = request.client.host if request.client else None

    async def attempt() -> Principal:
        token = bearer_token(request)
        if token is None:
            raise Unauthorized("Missing token: send 'Authorization: Bearer <token>'.")
        return await services.auth.authenticate(token)

    # refused tokens are counted per address; too many from here: 429 (a valid one: served)
    return await services.quotas.authenticating(address, attempt)


async def _user(who: Annotated[Principal, Depends(_principal)]) -> Principal:
    who.require_role("user")
    return who


async def user_principal(request: Request) -> Principal:
    """The caller as a user, for a route whose bearer token is optional (checked in the body)."""
    who = await _principal(request)
    who.require_role("user")
    return who


async def _agent(who: Annotated[Principal, Depends(_principal)]) -> Principal:
    who.require_role("agent")
    return who


def services_of(request: HTTPConnection) -> ServiceSet:
    """The process's services, which ``create_app`` put on the app's state."""
    services: ServiceSet = request.app.state.services
    return services


async def _services(request: Request) -> ServiceSet:
    # async on purpose: FastAPI runs a plain ``def`` dependency in its thread pool, which cost
    # a thread hop on every request (measured by bench/variants.py)
    return services_of(request)


UserPrincipal = Annotated[Principal, Depends(_user)]
AgentPrincipal = Annotated[Principal, Depends(_agent)]
Services = Annotated[ServiceSet, Depends(_services)]
