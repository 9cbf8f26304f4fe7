"""A request id in every log line and error response (issue 34, "Tracing").

``X-Request-Id`` is echoed when the client (or the proxy) sends a sane one, else generated; it
is on every response, in the error body as ``request_id`` (a field added to api.md's error
body, nothing renamed), and on every log line written while the request is served.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import httpx
import pytest

from maxclaw.logs import JsonFormatter
from tests.conftest import Harness


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.addHandler(handler)
    old = root.level
    root.setLevel(logging.INFO)
    try:
        yield out
    finally:
        root.removeHandler(handler)
        root.setLevel(old)


async def test_an_error_carries_the_request_id_it_was_sent(harness: Harness) -> None:
    resp = await harness.client.get("/v1/threads", headers={"X-Request-Id": "edge-4f1c.7"})
    assert resp.status_code == 401
    assert resp.headers["x-request-id"] == "edge-4f1c.7"
    body = resp.json()
    assert body["request_id"] == "edge-4f1c.7"
    assert body["code"] == "unauthorized" and body["message"] and body["data"] == {}


async def test_a_missing_or_unfit_id_is_generated(harness: Harness) -> None:
    for sent in (None, "x" * 300, "has spaces\tand tabs"):
        headers = {"X-Request-Id": sent} if sent is not None else {}
        resp = await harness.client.get("/v1/nothing-here", headers=headers)
        assert resp.status_code == 404
        made = resp.headers["x-request-id"]
        assert made and made != sent and len(made) <= 64
        assert resp.json()["request_id"] == made
    ok = await harness.client.get("/healthz")
    assert ok.status_code == 200 and ok.headers["x-request-id"]


async def test_every_log_line_of_a_request_names_it(harness: Harness,
                                                    json_log: io.StringIO) -> None:
    a = await harness.actor("max")
    resp = await a.user.get("/v1/threads", headers={"X-Request-Id": "trace-me-1"})
    assert resp.status_code == 200
    lines = [json.loads(line) for line in json_log.getvalue().splitlines()]
    served = [line for line in lines if line.get("msg") == "request"]
    assert served and all(line["request_id"] == "trace-me-1" for line in served)
    # outside a request, no id
    logging.getLogger("maxclaw").info("between requests")
    last = json.loads(json_log.getvalue().splitlines()[-1])
    assert "request_id" not in last


async def test_an_unexpected_error_names_the_request_too(harness: Harness,
                                                         json_log: io.StringIO) -> None:
    @harness.app.get("/v1/__boom")
    async def boom() -> None:
        raise RuntimeError("kaboom")

    harness.app.middleware_stack = None  # rebuilt with the new route
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=harness.app,
                                                             raise_app_exceptions=False),
                               base_url="http://test")
    async with client:
        resp = await client.get("/v1/__boom", headers={"X-Request-Id": "boom-1"})
    assert resp.status_code == 500
    assert resp.headers["x-request-id"] == "boom-1" and resp.json()["request_id"] == "boom-1"
    logged = [json.loads(line) for line in json_log.getvalue().splitlines()]
    assert any(line.get("msg") == "unexpected error" and line.get("request_id") == "boom-1"
               for line in logged)
