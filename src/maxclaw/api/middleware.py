"""ASGI middleware: body limits and content types, access log and request metrics."""

from __future__ import annotations

import json
import logging
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from maxclaw.metrics import Metrics

log = logging.getLogger("maxclaw.access")


async def _send_error(send: Send, status: int, code: str, message: str) -> None:
    body = json.dumps({"code": code, "message": message, "data": {}}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class BodyGuard:
    """413 for bodies over the limit (declared or streamed); 400 for non-JSON bodies on /v1."""

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
        if (scope["method"] in ("POST", "PUT", "PATCH") and scope["path"].startswith("/v1/")
                and declared not in (None, "0")):
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
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: wait for a disconnect, as servers do

        await self.app(scope, replay, send)


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
