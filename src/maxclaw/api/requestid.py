"""``X-Request-Id``: one id per request, in every log line, every response and error body.

A sane id from the client (or the reverse proxy in front) is kept, so one id follows a request
through the proxy's log and ours; anything else is replaced by a fresh one. The id is set in
``logs.REQUEST_ID`` while the request (or WebSocket) is served, sent back as the
``X-Request-Id`` header, and added as ``request_id`` to a JSON error body (api.md's
``{"code", "message", "data"}``, every producer of it included: handlers, the body guard,
``/mcp``), so a user's report of an error names the log lines that explain it.
"""

from __future__ import annotations

import json
import re
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from maxclaw.logs import REQUEST_ID

HEADER = b"x-request-id"
ERROR_KEYS = frozenset({"code", "message", "data"})
_SANE = re.compile(r"[A-Za-z0-9._:-]{1,64}")


def request_id_of(scope: Scope) -> str:
    """The client's id when it is 1-64 characters of ``A-Za-z0-9._:-``, else a new one."""
    for key, value in scope.get("headers", ()):
        if key == HEADER:
            sent: str = value.decode("latin-1")
            if _SANE.fullmatch(sent):
                return sent
            break
    return str(uuid.uuid4())


class RequestId:
    """The outermost middleware: it sees every response, errors from inner layers included."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        request_id = request_id_of(scope)
        token = REQUEST_ID.set(request_id)
        try:
            if scope["type"] == "websocket":
                await self.app(scope, receive, send)
            else:
                await self.app(scope, receive, _Stamping(send, request_id))
        finally:
            REQUEST_ID.reset(token)


class _Stamping:
    """``send`` with the header on every response and the id in a JSON error body (small:
    held whole, then sent with its new length)."""

    def __init__(self, send: Send, request_id: str) -> None:
        self.send = send
        self.request_id = request_id
        self.start: Message | None = None
        self.chunks: list[bytes] = []

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = [*message.get("headers", ()), (HEADER, self.request_id.encode())]
            message = {**message, "headers": headers}
            if message["status"] >= 400 and _is_json(headers):
                self.start = message  # held until the body is whole
                return
        elif message["type"] == "http.response.body" and self.start is not None:
            self.chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            await self._send_stamped_error()
            return
        await self.send(message)

    async def _send_stamped_error(self) -> None:
        assert self.start is not None
        body = b"".join(self.chunks)
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        # the error body alone; a tool call's refusal (with its ``content``) is a result the
        # service stored, and its retry replays it byte for byte
        if isinstance(parsed, dict) and {"code", "message"} <= parsed.keys() <= ERROR_KEYS:
            body = json.dumps({**parsed, "request_id": self.request_id}).encode()
        headers = [(k, v) for k, v in self.start["headers"] if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        await self.send({**self.start, "headers": headers})
        await self.send({"type": "http.response.body", "body": body})


def _is_json(headers: list[tuple[bytes, bytes]]) -> bool:
    return any(k.lower() == b"content-type" and v.startswith(b"application/json")
               for k, v in headers)
