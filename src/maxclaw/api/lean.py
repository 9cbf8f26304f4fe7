"""The hot routes without FastAPI's per-request machinery, with FastAPI's own semantics.

An agent's round trip is two requests (``POST …/messages`` with ``"execute": true``, then
Max's ``POST /v1/components/{id}/answer``) and a runtime waits on the claim; FastAPI's
generic request path (the scan over every included router, exit stacks, endpoint context,
the recursive dependency solver) costs a fifth to a third of the server's CPU per round trip
(docs/benchmarks.md, "The lean routes, measured again"). A ``LeanRoute`` serves one such
``APIRoute``, placed ahead of the routers, with everything that does not vary per request
worked out once when the app is built. It is a Starlette ``Route`` and uses only public
APIs (the pins in pyproject.toml hold FastAPI and Starlette to the minor its differential
test runs against):

- it matches only the route's path and method; any other request falls through to the
  FastAPI route untouched (so 404/405 and every other route behave as before);
- the body is read and parsed as FastAPI does (the same order: the JSON before
  authentication, the same errors), then validated against the endpoint parameter's own
  annotation, with FastAPI's rules for one body parameter (a missing body is ``Field
  required`` at ``body`` unless the parameter has a default; errors located under ``body``);
- the caller and the services come from the same functions the ``Depends`` aliases name
  (``api/deps.py``), read from the endpoint's signature once;
- the route's own endpoint function runs (the route module stays the one place that says
  what the endpoint does), and its result is serialised as FastAPI does for that route:
  through the route's response model (validated, then pydantic-core's JSON, honouring
  ``response_model_exclude_unset``) or ``json_ready`` (= ``jsonable_encoder``) without one;
  a ``Response`` returned by the endpoint is sent as is;
- Starlette's ``request_response`` sends exceptions to the app's handlers (api/errors.py),
  and the route's path is the FastAPI route's, so the access log and metrics name the same
  template.

The OpenAPI document is the FastAPI routes' (a lean route is not in the schema). A route
whose shape this does not cover (query, header or cookie parameters, other dependencies, more
than one body parameter) is refused when the app is built, not served differently. When the
app has ``dependency_overrides`` (tests may), lean routes step aside.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable
from copy import deepcopy
from typing import Annotated, Any, get_args, get_origin

from fastapi import FastAPI, params
from fastapi.exceptions import RequestValidationError, ResponseValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import TypeAdapter, ValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match, Route
from starlette.types import Scope

from maxclaw.api import deps
from maxclaw.api.encode import json_ready

Resolver = Callable[[Request], Awaitable[Any]]
_MISSING = object()


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


def _located(errors: list[Any], prefix: tuple[str, ...]) -> list[dict[str, Any]]:
    """pydantic's errors as FastAPI reports them: under ``prefix`` (``body``, ``response``)."""
    return [{**e, "loc": (*prefix, *e["loc"])} for e in errors]


class _Body:
    """The endpoint's one body parameter: its name, validator and default."""

    def __init__(self, name: str, parameter: inspect.Parameter) -> None:
        self.name = name
        default = parameter.default
        if isinstance(default, params.Body):
            if default.embed:
                raise ValueError(f"{name}: an embedded body is not lean")
            self.default = _MISSING if default.is_required() else default.default
        else:
            self.default = _MISSING if default is inspect.Parameter.empty else default
        self.adapter: TypeAdapter[Any] = TypeAdapter(parameter.annotation)

    def validate(self, body: Any) -> tuple[Any, list[dict[str, Any]]]:
        if body is _MISSING:
            if self.default is _MISSING:
                return None, [{"type": "missing", "loc": ("body",), "msg": "Field required",
                               "input": None}]
            return deepcopy(self.default), []
        try:
            return self.adapter.validate_python(body, from_attributes=True), []
        except ValidationError as e:
            return None, _located(e.errors(include_url=False), ("body",))


class LeanRoute(Route):
    """Serves one ``APIRoute`` (one method) ahead of FastAPI's routers; see the module doc."""

    def __init__(self, app: FastAPI, route: APIRoute, method: str = "POST") -> None:
        self.owner = app
        self.route = route
        self.method = method
        if route.dependencies:
            raise ValueError(f"{route.path}: route-level dependencies are not lean")
        self.call = route.endpoint
        self.resolvers: list[tuple[str, Resolver]] = []
        self.path_names: list[str] = []
        self.request_name: str | None = None
        self.body: _Body | None = None
        for name, parameter in inspect.signature(self.call, eval_str=True).parameters.items():
            self._take(route, name, parameter)
        expected = route.body_field.name if route.body_field is not None else None
        if (self.body.name if self.body is not None else None) != expected:
            raise ValueError(f"{route.path}: FastAPI reads another body ({expected})")
        self.status_code = route.status_code or 200  # FastAPI: the route's, else the default
        self.response: TypeAdapter[Any] | None = (
            TypeAdapter(route.response_model) if route.response_model is not None else None)
        self.exclude_unset = route.response_model_exclude_unset
        super().__init__(route.path, self._endpoint, methods=[method], include_in_schema=False)

    def _take(self, route: APIRoute, name: str, parameter: inspect.Parameter) -> None:
        """Sort one endpoint parameter: a dependency, a path parameter, the request, or the
        body; anything else makes the route not lean."""
        annotation = parameter.annotation
        if get_origin(annotation) is Annotated:
            depends = [m for m in get_args(annotation)[1:] if isinstance(m, params.Depends)]
            dependency = depends[0].dependency if depends else None
            resolver = RESOLVERS.get(dependency) if dependency is not None else None
            if resolver is None:
                raise ValueError(f"{route.path}: {name} has no lean resolver")
            self.resolvers.append((name, resolver))
        elif name in route.param_convertors:
            if annotation is not str:
                raise ValueError(f"{route.path}: path parameter {name} is not a str")
            self.path_names.append(name)
        elif annotation is Request:
            self.request_name = name
        elif isinstance(parameter.default, params.Param) or self.body is not None:
            raise ValueError(f"{route.path}: {name} is not lean")
        else:
            self.body = _Body(name, parameter)

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if (scope["type"] != "http" or scope["method"] != self.method
                or self.owner.dependency_overrides):
            return Match.NONE, {}
        match, child = super().matches(scope)
        # FastAPI's router names only its own routes in the scope; the access log reads it
        return match, {**child, "route": self} if match is Match.FULL else child

    async def _read_body(self, request: Request) -> Any:
        """The body as FastAPI's request handler reads it (``fastapi/routing.py``)."""
        try:
            body_bytes = await request.body()
            if not body_bytes:
                return _MISSING
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

    async def _endpoint(self, request: Request) -> Response:
        body = await self._read_body(request) if self.body is not None else _MISSING
        values: dict[str, Any] = {}
        for name, resolver in self.resolvers:  # in the endpoint's parameter order, as FastAPI
            values[name] = await resolver(request)
        for name in self.path_names:
            values[name] = request.path_params[name]
        if self.body is not None:
            values[self.body.name], errors = self.body.validate(body)
            if errors:
                raise RequestValidationError(errors, body=None if body is _MISSING else body)
        if self.request_name is not None:
            values[self.request_name] = request
        raw = await self.call(**values)
        if isinstance(raw, Response):
            return raw
        if self.response is None:
            return JSONResponse(json_ready(raw), status_code=self.status_code)
        try:
            value = self.response.validate_python(raw, from_attributes=True)
        except ValidationError as e:
            raise ResponseValidationError(
                errors=_located(e.errors(include_url=False), ("response",)), body=raw) from e
        content = self.response.dump_json(value, by_alias=True,
                                          exclude_unset=self.exclude_unset)
        return Response(content=content, media_type="application/json",
                        status_code=self.status_code)


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
    for route in _api_routes():
        for method in route.methods or ():
            if (method, route.path) in wanted:
                found[(method, route.path)] = route
    missing = [key for key in wanted if key not in found]
    if missing:
        raise ValueError(f"hot routes not found: {missing}")
    app.router.routes[0:0] = [LeanRoute(app, found[key], key[0]) for key in wanted]


def _api_routes() -> list[APIRoute]:
    from maxclaw.api.routes import ROUTERS

    return [route for router in ROUTERS for route in router.routes
            if isinstance(route, APIRoute)]
