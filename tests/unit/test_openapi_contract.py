"""``/openapi.json`` against the contract (``docs/api.md``): every response body described,
the same HTTP endpoints on both sides, and the central bodies carrying the documented fields.

The document is the app's own (``create_app(...).openapi()``, no database needed: the pool
opens in the lifespan); ``docs/api.md`` is parsed, not copied, so a route or a field added to
one side and not the other fails here.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from starlette.routing import BaseRoute

from maxclaw.api.routes import ROUTERS
from maxclaw.app import create_app
from maxclaw.settings import Settings

API_MD = Path(__file__).resolve().parents[2] / "docs" / "api.md"
ENDPOINT = re.compile(r"`(GET|POST|PUT|PATCH|DELETE)\s+(/[^`?\s]*)")

# Served and described in /openapi.json, not (yet) in api.md: one line each on why.
SERVED_EXTRAS = {
    ("POST", "/v1/decisions/{}/dismiss"): "the panel's 'dismiss' of an answer Main gave",
    ("GET", "/v1/push/devices"): "the WebUI's list of the user's devices",
    ("POST", "/v1/push/test"): "the WebUI's 'send a test notification'",
    ("GET", "/v1/push/config"): "the VAPID public key a browser subscribes with",
    ("POST", "/v1/agent/threads"): "a new thread for an unbound MCP host (--new-thread)",
    ("POST", "/v1/agent/threads/{}/inbox"): "what `maxclaw inbox` reads (outside a turn)",
}
# In api.md, served, and not in /openapi.json: one line each on why.
DOCUMENTED_ONLY = {
    ("GET", "/healthz"): "an unauthenticated probe, kept out of the API reference",
    ("GET", "/readyz"): "an unauthenticated probe, kept out of the API reference",
    ("GET", "/v1/ws"): "the WebSocket (OpenAPI describes HTTP; api.md documents the frames)",
}


def normalised(path: str) -> str:
    """``/v1/threads/{thread_id}`` and ``/v1/threads/{id}`` as one key."""
    return re.sub(r"\{[^}]*\}", "{}", path.rstrip("/") or "/")


@pytest.fixture(scope="module")
def app() -> FastAPI:
    return create_app(Settings(database_url="postgresql://nobody@127.0.0.1:1/unused"))


@pytest.fixture(scope="module")
def openapi(app: FastAPI) -> dict[str, Any]:
    return app.openapi()


@pytest.fixture(scope="module")
def api_md() -> str:
    return API_MD.read_text(encoding="utf-8")


def operations(openapi: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(method.upper(), normalised(path)): op
            for path, ops in openapi["paths"].items() for method, op in ops.items()}


def documented_endpoints(api_md: str) -> set[tuple[str, str]]:
    return {(method, normalised(path)) for method, path in ENDPOINT.findall(api_md)}


def resolve(openapi: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = openapi["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def body_schema(openapi: dict[str, Any], method: str, path: str,
                status: str = "200") -> dict[str, Any]:
    response = operations(openapi)[(method, normalised(path))]["responses"][status]
    return resolve(openapi, response["content"]["application/json"]["schema"])


def properties(openapi: dict[str, Any], schema: dict[str, Any]) -> set[str]:
    return set(resolve(openapi, schema).get("properties", {}))


def top_level_keys(obj: str) -> set[str]:
    """The keys of api.md's shorthand object ``{"id", "kind": "a|b", "options": [{…}]}``: the
    quoted names at depth one that are not a value (a value follows ``: ``)."""
    keys: set[str] = set()
    depth = 0
    for match in re.finditer(r'[{}\[\]]|(?<!: )"([A-Za-z_]+)"', obj):
        token = match.group(0)
        if token in "{[":
            depth += 1
        elif token in "}]":
            depth -= 1
        elif depth == 1:
            keys.add(match.group(1))
    return keys


def shorthand(api_md: str, lead: str) -> set[str]:
    """The keys of the first shorthand object on the line that starts with ``lead``."""
    for line in api_md.splitlines():
        if line.startswith(lead):
            found = re.search(r"`(\{.*?\})`", line[len(lead):])
            assert found is not None, f"api.md: no object after {lead!r}"
            return top_level_keys(found.group(1))
    raise AssertionError(f"api.md has no line starting with {lead!r}")


def endpoint_answer(api_md: str, method: str, path: str) -> set[str]:
    """The keys of the object in the answer column of an endpoint table's row."""
    for line in api_md.splitlines():
        if line.startswith(f"| `{method} {path}"):
            answer = line.rstrip(" |").rsplit(" | ", 1)[1]
            found = re.search(r"(\{.*\})", answer)
            assert found is not None, f"api.md: no object in the answer of {method} {path}"
            return top_level_keys(found.group(1))
    raise AssertionError(f"api.md has no table row for {method} {path}")


# -- the parser itself (a parser that finds nothing would pass everything below) -----------


def test_the_parsers_read_the_contract(api_md: str) -> None:
    documented = documented_endpoints(api_md)
    assert ("POST", "/v1/components/{}/answer") in documented
    assert ("GET", "/v1/threads/{}/messages") in documented  # its query string cut off
    assert len(documented) >= 30
    assert top_level_keys('{"id", "kind": "a|b", "options": [{"id", "label"}], "x": {"y"}}') \
        == {"id", "kind", "options", "x"}
    assert {"id", "turn_state", "rev"} <= shorthand(api_md, "Thread:")


# -- (a) every 2xx described ---------------------------------------------------------------


def test_every_2xx_of_every_route_has_a_response_schema(openapi: dict[str, Any]) -> None:
    missing = []
    for (method, path), op in operations(openapi).items():
        for status, response in op["responses"].items():
            if not status.startswith("2") or status == "204":  # 204: no body, by definition
                continue
            schema = response.get("content", {}).get("application/json", {}).get("schema")
            if not schema or not properties(openapi, schema):
                missing.append(f"{method} {path} {status}")
    assert missing == []


def test_every_error_status_has_the_error_body(openapi: dict[str, Any]) -> None:
    for (method, path), op in operations(openapi).items():
        for status in ("401", "404", "422"):
            schema = op["responses"][status]["content"]["application/json"]["schema"]
            assert {"code", "message", "data"} <= properties(openapi, schema), \
                f"{method} {path} {status}"


# -- (b) the same endpoints as api.md ------------------------------------------------------


def test_the_endpoints_are_the_contracts(openapi: dict[str, Any], api_md: str) -> None:
    served = set(operations(openapi))
    documented = documented_endpoints(api_md)
    assert sorted(served - documented - set(SERVED_EXTRAS)) == [], "served, not in api.md"
    assert sorted(documented - served - set(DOCUMENTED_ONLY)) == [], "in api.md, not served"
    # the allow-lists hold no stale entry
    assert set(SERVED_EXTRAS) <= served - documented
    assert set(DOCUMENTED_ONLY) <= documented - served


def test_the_endpoints_outside_the_schema_are_served() -> None:
    routes: list[BaseRoute] = [route for router in ROUTERS for route in router.routes]
    # a WebSocket route has no methods: its handshake is a GET
    mounted = {(method, normalised(getattr(r, "path", ""))) for r in routes
               for method in (getattr(r, "methods", None) or {"GET"})}
    assert set(DOCUMENTED_ONLY) <= mounted


# -- (c) the central bodies carry api.md's fields ------------------------------------------


def test_a_component_has_every_documented_field(openapi: dict[str, Any], api_md: str) -> None:
    documented = (shorthand(api_md, "Component definition")
                  | shorthand(api_md, "Component (`GET /v1/components/{id}`)"))
    assert {"options", "stakes", "status", "answered_via", "seen_at"} <= documented
    for method, path in (("GET", "/v1/components/{component_id}"),
                         ("POST", "/v1/components/{component_id}/answer"),
                         ("POST", "/v1/components/{component_id}/to-main"),
                         ("POST", "/v1/components/{component_id}/revoke")):
        have = set(body_schema(openapi, method, path).get("properties", {}))
        assert documented - have == set(), f"{method} {path}"


def test_a_decision_has_every_documented_field(openapi: dict[str, Any], api_md: str) -> None:
    documented = shorthand(api_md, "Decision:")
    assert {"allow_text", "settled_via", "bar_snoozed_until"} <= documented
    for method, path in (("POST", "/v1/decisions/{decision_id}/settle"),
                         ("POST", "/v1/decisions/{decision_id}/snooze"),
                         ("POST", "/v1/push/actions")):
        have = set(body_schema(openapi, method, path).get("properties", {}))
        assert documented - have == set(), f"{method} {path}"
    listed = body_schema(openapi, "GET", "/v1/decisions")["properties"]["decisions"]["items"]
    assert documented - properties(openapi, listed) == set()


def test_a_thread_has_every_documented_field(openapi: dict[str, Any], api_md: str) -> None:
    documented = shorthand(api_md, "Thread:")
    for method, path, status in (("GET", "/v1/threads/{thread_id}", "200"),
                                 ("POST", "/v1/threads", "201"),
                                 ("POST", "/v1/agent/threads", "201")):
        have = set(body_schema(openapi, method, path, status).get("properties", {}))
        assert documented - have == set(), f"{method} {path}"


def test_a_message_page_has_every_documented_field(openapi: dict[str, Any],
                                                   api_md: str) -> None:
    page = body_schema(openapi, "GET", "/v1/threads/{thread_id}/messages")
    assert endpoint_answer(api_md, "GET", "/v1/threads/{id}/messages") <= set(page["properties"])
    message = shorthand(api_md, "Message:")
    assert {"display", "source_meta", "components"} <= message
    assert message - properties(openapi, page["properties"]["messages"]["items"]) == set()
    posted = body_schema(openapi, "POST", "/v1/threads/{thread_id}/messages", "201")
    assert message - set(posted["properties"]) == set()


def test_an_execute_result_has_every_documented_field(openapi: dict[str, Any],
                                                      api_md: str) -> None:
    path = "/v1/agent/threads/{thread_id}/tool-calls/{tool_call_id}/execute"
    documented = endpoint_answer(api_md, "POST", "/v1/agent/threads/{id}/tool-calls/")
    assert documented == {"tool_call_id", "content"}
    assert documented <= set(body_schema(openapi, "POST", path)["properties"])
    refused = set(body_schema(openapi, "POST", path, "409")["properties"])
    assert {"code", "message", "data", "tool_call_id", "content"} <= refused


def test_every_error_status_of_every_route_is_the_error_body(openapi: dict[str, Any]) -> None:
    """api.md's error body behind each 4xx/5xx a route documents: ``ERRORS`` refers to
    ErrorBody's schema (no per-route model, api/responses.py), so the reference must resolve."""
    seen = 0
    for (method, path), op in operations(openapi).items():
        for status in op["responses"]:
            if status in {"401", "404", "422", "503"}:
                schema = body_schema(openapi, method, path, status)
                assert {"code", "message", "data"} <= set(schema["properties"]), (path, status)
                assert {"code", "message"} <= set(schema["required"])
                seen += 1
    assert seen >= 4 * 40  # every route of the routers, not a handful
