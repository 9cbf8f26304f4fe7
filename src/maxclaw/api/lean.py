"""The hot routes without FastAPI's per-request machinery, with FastAPI's own semantics.

An agent's round trip is two requests (``POST …/messages`` with ``"execute": true``, then
Max's ``POST /v1/components/{id}/answer``) and a runtime waits on the claim; profiled under
load, FastAPI's generic request path (the scan over every included router, two exit stacks,
endpoint context, the content-type parse, the recursive dependency solver) cost as much of
the server's CPU as those endpoints' own code (docs/benchmarks.md). A ``LeanRoute`` serves one
such ``APIRoute``, placed ahead of the routers, with everything that does not vary per request
worked out once when the app is built:

- it matches only the route's path and method; any other request falls through to the
  FastAPI route untouched (so 404/405 and every other route behave as before);
- the body is read and parsed as FastAPI does (same order: the JSON before authentication,
  the same errors), then validated by FastAPI's own ``request_body_to_args`` against the
  route's own body field, so a bad body is the same 422 with the same ``loc``;
- the caller and the services come from the same functions the ``Depends`` aliases name
  (``api/deps.py``), looked up once per route instead of solved per request;
- the route's own endpoint function runs (the route module stays the one place that says
  what the endpoint does), and its result is serialised exactly as FastAPI does for that
  route: through the route's response field (validated, then pydantic-core's JSON) or, for a
  route without one (the claim), ``jsonable_encoder``'s result (``json_ready``: the value
  itself when it is plain JSON already) in a ``JSONResponse``; a ``Response`` returned by the
  endpoint is sent as is;
- ``scope["route"]`` is the FastAPI route, so the access log and the metrics name the same
  route template; exceptions go to the same handlers (api/errors.py).

The OpenAPI document is the FastAPI routes' (a lean route is not in the schema). A route whose
shape this does not cover (query, header or cookie parameters, dependencies other than the
ones below) is refused when the app is built, not served differently. When the app has
``dependency_overrides`` (tests may), lean routes step aside.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI
from fastapi._compat import Undefined
from fastapi.dependencies.utils import request_body_to_args, request_params_to_args
from fastapi.exceptions import RequestValidationError, ResponseValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic.fields import FieldInfo
from starlette._exception_handler import wrap_app_handling_exceptions
from starlette._utils import get_route_path
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match
from starlette.types import Receive, Scope, Send

from maxclaw.api import deps
from maxclaw.api.encode import json_ready

Resolver = Callable[[Request], Awaitable[Any]]


async def _agent(request: Request) -> Any:
    return await deps._agent(await deps._principal(request))


async def _user(request: Request) -> Any:
    return await deps._user(await deps._principal(request))


# the dependencies of api/deps.py a lean route resolves, by the function ``Depends`` names
RESOLVERS: dict[Callable[..., Any], Resolver] = {
    deps._agent: _agent,
    deps._user: _user,
    deps._services: deps._services,
}

def _is_json_content_type(value: str) -> bool:
    """FastAPI's test (``email.message``'s main type ``application``, subtype ``json`` or
    ``…+json``), without building a ``Message`` per request."""
    media = value.split(";", 1)[0].strip().lower()
    main, _, sub = media.partition("/")
    if media.count("/") != 1 or not main or not sub:
        # email.message falls back to text/plain for a malformed type
        return False
    return main == "application" and (sub == "json" or sub.endswith("+json"))


class LeanRoute(BaseRoute):
    """Serves one ``APIRoute`` (one method) ahead of FastAPI's routers; see the module doc."""

    def __init__(self, app: FastAPI, route: APIRoute, method: str = "POST") -> None:
        self.app = app
        self.route = route
        self.path = route.path
        self.method = method
        self.path_regex: re.Pattern[str] = route.path_regex
        self.param_convertors = route.param_convertors
        self.include_in_schema = False
        dependant = route.dependant
        unsupported = [name for name, params in (
            ("query", dependant.query_params), ("header", dependant.header_params),
            ("cookie", dependant.cookie_params)) if params]
        if (unsupported or dependant.websocket_param_name or dependant.response_param_name
                or dependant.background_tasks_param_name or len(dependant.body_params) > 1
                or route.dependencies):
            raise ValueError(f"{route.path}: not a lean route ({unsupported or 'its shape'})")
        self.resolvers: list[tuple[str, Resolver]] = []
        for sub in dependant.dependencies:
            resolver = RESOLVERS.get(sub.call) if sub.call is not None else None
            if resolver is None or sub.name is None:
                raise ValueError(f"{route.path}: dependency {sub.call!r} has no lean resolver")
            self.resolvers.append((sub.name, resolver))
        self.request_param = dependant.request_param_name
        self.path_params = dependant.path_params
        self.body_field = dependant.body_params[0] if dependant.body_params else None
        self.embed_body = bool(getattr(route, "_embed_body_fields", False))
        if self.body_field is not None and not isinstance(self.body_field.field_info,
                                                          FieldInfo):
            raise ValueError(f"{route.path}: unsupported body")
        self.call = dependant.call
        self.status_code = route.status_code
        self.response_field = route.response_field

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if (scope["type"] != "http" or scope["method"] != self.method
                or self.app.dependency_overrides):
            return Match.NONE, {}
        match = self.path_regex.match(get_route_path(scope))
        if match is None:
            return Match.NONE, {}
        params = {k: self.param_convertors[k].convert(v) for k, v in match.groupdict().items()}
        return Match.FULL, {"endpoint": self.route.endpoint,
                            "path_params": {**scope.get("path_params", {}), **params}}

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope["route"] = self.route  # what FastAPI puts there: the access log's route template
        request = Request(scope, receive, send)

        async def respond(scope: Scope, receive: Receive, send: Send) -> None:
            response = await self._response(request)
            await response(scope, receive, send)

        await wrap_app_handling_exceptions(respond, request)(scope, receive, send)

    async def _body(self, request: Request) -> Any:
        """The body as FastAPI's request handler reads it (``fastapi/routing.py``)."""
        try:
            body_bytes = await request.body()
            if not body_bytes:
                return Undefined
            content_type = request.headers.get("content-type")
            if content_type and _is_json_content_type(content_type):
                return await request.json()
            return body_bytes  # strict content type: not parsed (BodyGuard refuses it first)
        except json.JSONDecodeError as e:
            raise RequestValidationError(
                [{"type": "json_invalid", "loc": ("body", e.pos), "msg": "JSON decode error",
                  "input": {}, "ctx": {"error": e.msg}}], body=e.doc) from e
        except HTTPException:
            raise
        except Exception as e:
            raise HTTPException(status_code=400,
                                detail="There was an error parsing the body") from e

    async def _response(self, request: Request) -> Response:
        body = await self._body(request) if self.body_field is not None else Undefined
        values: dict[str, Any] = {}
        for name, resolver in self.resolvers:  # in the endpoint's parameter order, as FastAPI
            values[name] = await resolver(request)
        path_values, errors = request_params_to_args(self.path_params, request.path_params)
        values.update(path_values)
        if self.body_field is not None:
            body_values, body_errors = await request_body_to_args(
                [self.body_field], body, self.embed_body)
            values.update(body_values)
            errors += body_errors
        if errors:
            raise RequestValidationError(errors, body=None if body is Undefined else body)
        if self.request_param:
            values[self.request_param] = request
        assert self.call is not None
        raw = await self.call(**values)
        if isinstance(raw, Response):
            return raw
        status = self.status_code or 200  # FastAPI: the route's, else the class default
        field = self.response_field
        if field is None:
            return JSONResponse(json_ready(raw), status_code=status)  # = jsonable_encoder's
        value, field_errors = field.validate(raw, {}, loc=("response",))
        if field_errors:
            raise ResponseValidationError(errors=field_errors, body=raw)
        content = field.serialize_json(value, include=None, exclude=None, by_alias=True,
                                       exclude_unset=False, exclude_defaults=False,
                                       exclude_none=False)
        return Response(content=content, media_type="application/json", status_code=status)


# The agent's round trip (and its three-request form, with ``execute``) and the runtime's
# claim: (method, path) of the FastAPI routes served lean. Their route functions stay where
# they are (api/routes/), one line each.
HOT_ROUTES = [
    ("POST", "/v1/agent/threads/{thread_id}/messages"),
    ("POST", "/v1/components/{component_id}/answer"),
    ("POST", "/v1/agent/turns/claim"),
    ("POST", "/v1/agent/threads/{thread_id}/tool-calls/{tool_call_id}/execute"),
]


def install_lean_routes(app: FastAPI, hot: list[tuple[str, str]] | None = None) -> None:
    """Put a ``LeanRoute`` for each hot route ahead of every other route of ``app``."""
    wanted = hot if hot is not None else HOT_ROUTES
    found: dict[tuple[str, str], APIRoute] = {}
    for route in _api_routes(app):
        for method in route.methods or ():
            if (method, route.path) in wanted:
                found[(method, route.path)] = route
    missing = [key for key in wanted if key not in found]
    if missing:
        raise ValueError(f"hot routes not found: {missing}")
    app.router.routes[0:0] = [LeanRoute(app, found[key], key[0]) for key in wanted]


def _api_routes(app: FastAPI) -> list[APIRoute]:
    from maxclaw.api.routes import ROUTERS

    return [route for router in ROUTERS for route in router.routes
            if isinstance(route, APIRoute)]
