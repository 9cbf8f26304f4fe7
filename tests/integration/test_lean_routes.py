"""The hot routes served lean (api/lean.py) answer exactly as the FastAPI routes they stand in
for: the same status, content type and body bytes for good and bad requests, the same route
template in the metrics, the same OpenAPI document."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from maxclaw.api.lean import HOT_ROUTES, LeanRoute
from tests.cards import CHOICE, TEXT, ask_args, new_thread
from tests.conftest import Harness


@contextmanager
def lean_off(app: Any) -> Iterator[None]:
    """The app without lean routes: every request through FastAPI's routers."""
    routes = app.router.routes
    lean = [r for r in routes if isinstance(r, LeanRoute)]
    routes[:] = [r for r in routes if not isinstance(r, LeanRoute)]
    try:
        yield
    finally:
        routes[0:0] = lean


def _seen(resp: httpx.Response) -> tuple[int, str | None, str | None, bytes]:
    return (resp.status_code, resp.headers.get("content-type"),
            resp.headers.get("content-length"), resp.content)


async def _both(h: Harness, client: httpx.AsyncClient, method: str, path: str,
                **kwargs: Any) -> tuple[Any, Any]:
    # one request id for both, or the error bodies' request_id would tell them apart
    kwargs["headers"] = {**kwargs.get("headers", {}), "X-Request-Id": "lean-or-plain"}
    lean = _seen(await client.request(method, path, **kwargs))
    with lean_off(h.app):
        plain = _seen(await client.request(method, path, **kwargs))
    return lean, plain


def test_every_hot_route_is_lean_and_the_schema_is_the_routers(harness: Harness) -> None:
    lean = [r for r in harness.app.router.routes if isinstance(r, LeanRoute)]
    assert [(r.method, r.path) for r in lean] == HOT_ROUTES
    schema = harness.app.openapi()
    with lean_off(harness.app):
        harness.app.openapi_schema = None
        assert harness.app.openapi() == schema
    for method, path in HOT_ROUTES:
        assert method.lower() in schema["paths"][path]


async def test_refusals_are_the_same_bytes(harness: Harness) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    json_h = {"Content-Type": "application/json"}
    bodies: list[dict[str, Any]] = [
        {}, {"content": b"{"}, {"content": b"[]"}, {"content": b"null"}, {"content": b'"x"'},
        {"content": b"\xff\xfe"}, {"content": b"[" * 5000 + b"]" * 5000},
        {"content": b'{"selected": ["keep"]}'}, {"content": b'{"wait_s": -1}'},
        {"content": b'{"wait_s": "soon"}'}, {"content": b'{"runtime_id": 7}'},
        {"content": b'{"role": "nobody"}'}, {"content": b'{"role": "tool"}'},
    ]
    paths = [f"/v1/agent/threads/{tid}/messages",
             "/v1/agent/threads/00000000-0000-0000-0000-000000000000/messages",
             "/v1/agent/threads/not-a-uuid/messages",
             "/v1/components/nope:q1/answer", "/v1/agent/turns/claim",
             f"/v1/agent/threads/{tid}/tool-calls/call_none/execute"]
    clients = {"none": harness.client, "user": a.user, "agent": a.agent}
    compared = 0
    for who, client in clients.items():
        for path in paths:
            for body in bodies:
                lean, plain = await _both(harness, client, "POST", path, headers=json_h,
                                          **body)
                assert lean == plain, (who, path, body)
                compared += 1
            # a body that is not JSON, and the other methods (not served lean at all)
            for method, kwargs in (("POST", {"content": b"x=1",
                                             "headers": {"Content-Type": "text/plain"}}),
                                   ("GET", {}), ("PUT", {"json": {}})):
                lean, plain = await _both(harness, client, method, path, **kwargs)
                assert lean == plain, (who, path, method)
    assert compared == len(clients) * len(paths) * len(bodies)


_IDS = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
                  r"|\d{4}-\d\d-\d\dT[0-9:.]+(Z|[+-]\d\d:\d\d)?")


def _shape(resp: httpx.Response) -> tuple[int, str | None, Any]:
    """Status, content type and the body with ids, times and numbers of rows masked."""
    def mask(value: Any, key: str = "") -> Any:
        if isinstance(value, dict):
            return {k: mask(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [mask(v) for v in value]
        if isinstance(value, str):
            return _IDS.sub("…", value)
        if isinstance(value, int) and not isinstance(value, bool) and (
                key in ("id", "rev", "message_id", "tool_message_id", "before_id")
                or key.endswith("_id")):
            return 0
        return value
    return resp.status_code, resp.headers.get("content-type"), mask(resp.json())


def _card_row(call_id: str) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "execute": True,
            "tool_calls": [{"id": call_id, "type": "function", "function": {
                "name": "ask_user_question", "arguments": json.dumps(ask_args(CHOICE, TEXT))}}]}


async def test_the_round_trip_and_the_claim_answer_the_same(harness: Harness) -> None:
    """Two users do the same round trip, one lean and one through FastAPI's routers."""
    seen: dict[bool, list[Any]] = {}
    for lean in (True, False):
        a = await harness.actor(f"max{int(lean)}")
        tid = await new_thread(a.user)
        steps = []
        with (lean_off(harness.app) if not lean else _nothing()):
            steps.append(_shape(await a.agent.post(f"/v1/agent/threads/{tid}/messages",
                                                   json=_card_row("call_l1"))))
            # the same post again: idempotent on the tool call id
            steps.append(_shape(await a.agent.post(f"/v1/agent/threads/{tid}/messages",
                                                   json=_card_row("call_l1"))))
            steps.append(_shape(await a.user.post("/v1/components/call_l1:q1/answer",
                                                  json={"selected": ["keep"]})))
            steps.append(_shape(await a.user.post("/v1/components/call_l1:q1/answer",
                                                  json={"selected": ["drop"]})))  # settled
            steps.append(_shape(await a.user.post("/v1/components/call_l1:q2/answer",
                                                  json={"selected": 3})))  # invalid
            claim = await a.agent.post("/v1/agent/turns/claim",
                                       json={"wait_s": 0, "runtime_id": "lean-test"})
            steps.append(_shape(claim))
            empty = await a.agent.post("/v1/agent/turns/claim", json={"wait_s": 0})
            steps.append((empty.status_code, empty.content))
            # the three-request form: a posted call, then execute (twice: the stored result)
            await a.agent.post(f"/v1/agent/threads/{tid}/messages",
                               json={**_card_row("call_l2"), "execute": False})
            for _ in range(2):
                steps.append(_shape(await a.agent.post(
                    f"/v1/agent/threads/{tid}/tool-calls/call_l2/execute")))
        seen[lean] = steps
    assert seen[True] == seen[False]
    statuses = [s[0] for s in seen[True]]
    assert statuses == [201, 201, 200, 409, 422, 200, 204, 200, 200], statuses


@contextmanager
def _nothing() -> Iterator[None]:
    yield


async def test_metrics_name_the_route_template(harness: Harness,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    served: list[str] = []
    handle = LeanRoute.handle

    async def spy(self: LeanRoute, scope: Any, receive: Any, send: Any) -> None:
        served.append(self.path)
        await handle(self, scope, receive, send)

    monkeypatch.setattr(LeanRoute, "handle", spy)
    a = await harness.actor("max")
    resp = await a.user.post("/v1/components/nope:q1/answer", json={"selected": ["keep"]})
    assert resp.status_code == 404
    assert served == ["/v1/components/{component_id}/answer"]  # served lean, not fallen through
    metric = harness.services.metrics.requests.labels(
        "POST", "/v1/components/{component_id}/answer", "404")
    assert metric._value.get() == 1
