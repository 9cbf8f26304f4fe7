"""Issue 34, finding 4: the caller is authenticated from the headers before the body is read,
and nesting is judged from the body's bytes rather than by walking the parsed value.

Before, BodyGuard read up to 1 MiB of an unauthenticated body and the route parsed it (then
walked every node for its depth) before looking at the token."""

from __future__ import annotations

import json
from typing import Any

from maxclaw.jsonlimits import MAX_DEPTH
from tests.conftest import Harness


async def _call(app: Any, path: str, token: str | None, body: bytes) -> tuple[int, bool, Any]:
    """One raw ASGI request: (status, whether the app read the body, the JSON answer)."""
    read = False
    sent: list[dict[str, Any]] = []
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(body)).encode())]
    if token is not None:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(),
             "query_string": b"", "root_path": "", "headers": headers,
             "client": ("203.0.113.9", 5000), "server": ("test", 80)}

    async def receive() -> dict[str, Any]:
        nonlocal read
        read = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    answer = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, read, json.loads(answer)


async def test_a_bad_token_is_refused_before_its_body_is_read(harness: Harness) -> None:
    max_ = await harness.actor("max")
    path = f"/v1/agent/threads/{max_.main_thread_id}/messages"
    body = json.dumps({"role": "tool", "tool_call_id": "t", "content": [""] * 200_000}).encode()
    for token in (None, "mc_not-a-token", max_.agent_token + "x"):
        status, read, answer = await _call(harness.app, path, token, body)
        assert (status, answer["code"], read) == (401, "unauthorized", False), token


async def test_a_good_token_still_posts_and_deep_bodies_are_refused_from_their_bytes(
        harness: Harness) -> None:
    max_ = await harness.actor("max")
    path = f"/v1/agent/threads/{max_.main_thread_id}/messages"
    ok = json.dumps({"role": "event", "body": "job done", "source_meta": {"job": 1}}).encode()
    status, read, answer = await _call(harness.app, path, max_.agent_token, ok)
    assert (status, read) == (201, True), answer
    deep = ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)).encode()
    body = b'{"role": "tool", "tool_call_id": "d", "content": ' + deep + b"}"
    status, _, answer = await _call(harness.app, path, max_.agent_token, body)
    assert status == 422 and answer["data"]["errors"][0]["loc"] == ["body"]
    # brackets inside strings do not nest
    text = json.dumps({"role": "tool", "tool_call_id": "s", "content": "[" * 1000}).encode()
    status, _, answer = await _call(harness.app, path, max_.agent_token, text)
    assert status == 201, answer
