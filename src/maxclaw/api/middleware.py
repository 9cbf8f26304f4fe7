"""ASGI middleware: body limits and content types, access log and request metrics."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from maxclaw.api import deps
from maxclaw.errors import MaxclawError, RateLimited
from maxclaw.jsonlimits import MAX_BODY_STRINGS, MAX_DEPTH, count_strings, nested_deeper
from maxclaw.metrics import Metrics

log = logging.getLogger("maxclaw.access")
# /v1 routes that take a body without a bearer token (they check a token of their own in it)
BEARERLESS = frozenset({"/v1/push/actions", "/v1/signin/redeem"})


async def _send_error(send: Send, status: int, code: str, message: str,
                      data: dict[str, Any] | None = None,
                      headers: list[tuple[bytes, bytes]] | None = None) -> None:
    body = json.dumps({"code": code, "message": message, "data": data or {}}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()), *(headers or [])]})
    await send({"type": "http.response.body", "body": body})


async def _send_refusal(send: Send, exc: MaxclawError) -> None:
    """A domain error as api/errors.py renders it (this middleware runs outside its handlers)."""
    headers = ([(b"retry-after", str(exc.retry_after_s).encode())]
               if isinstance(exc, RateLimited) else None)
    body = exc.body()
    await _send_error(send, exc.http_status, body["code"], body["message"], body.get("data"),
                      headers)


class BodyGuard:
    """413 for bodies over the limit (declared or streamed); 400 for non-JSON bodies on /v1;
    the caller authenticated from the headers before any body is read; 422 for a body nested
    deeper than the parser may go, found in its bytes before anything parses them.

    The principal found here is kept on the scope (``deps.PRINCIPAL``) for the route, so a
    request is authenticated once; a refused token costs no read and no parse of its body."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await _send_error(send, 413, "too_large", "The request body is over 1 MiB.")
            return
        api_body = (scope["method"] in ("POST", "PUT", "PATCH")
                    and scope["path"].startswith("/v1/") and declared != "0")
        if api_body and scope["path"] not in BEARERLESS:
            try:  # who is asking, from the headers alone: before a byte of the body
                scope[deps.PRINCIPAL] = await deps._principal(Request(scope))
            except MaxclawError as exc:
                await _send_refusal(send, exc)
                return
        if api_body and declared is not None:
            ctype = headers.get("content-type", "").split(";")[0].strip().lower()
            if ctype != "application/json":
                await _send_error(send, 400, "bad_request",
                                  "Send the body as JSON (Content-Type: application/json).")
                return
        # Read the body here (it is at most max_bytes), so a chunked body over the limit is a
        # clean 413 before any route runs, rather than a parse error half-way through.
        chunks: list[bytes] = []
        received = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break  # the client went away; the app sees a disconnect below
            received += len(message.get("body", b""))
            if received > self.max_bytes:
                await _send_error(send, 413, "too_large", "The request body is over 1 MiB.")
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        refusal = (_shape_refusal(body) if api_body or scope["path"].startswith("/mcp")
                   else None)
        if refusal is not None:
            await _send_error(send, 422, "invalid", f"body: {refusal}",
                              {"errors": [{"loc": ["body"], "msg": refusal}]})
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: wait for a disconnect, as servers do

        await self.app(scope, replay, send)


def _shape_refusal(body: bytes) -> str | None:
    """Why a JSON body is refused before it is parsed (too deep, too many strings), or None."""
    if nested_deeper(body):
        return f"nested deeper than {MAX_DEPTH} levels"
    if count_strings(body) > MAX_BODY_STRINGS:
        return (f"more than {MAX_BODY_STRINGS:,} strings (keys included); send a large "
                "result as one string")
    return None


class AccessLog:
    """One structured line and two metrics per request (route template, not raw path)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def capture(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, capture)
        finally:
            elapsed = time.perf_counter() - start
            route = _route_template(scope)
            self.metrics.requests.labels(scope["method"], route, str(status)).inc()
            self.metrics.latency.labels(scope["method"], route).observe(elapsed)
            if route not in ("/healthz", "/readyz", "/metrics"):
                log.info("request", extra={"method": scope["method"], "path": route,
                                           "status": status,
                                           "duration_ms": round(elapsed * 1000, 2)})


def _route_template(scope: Scope) -> str:
    route = scope.get("route")
    path = getattr(route, "path", None)
    return str(path) if path else "unmatched"
