"""``/mcp`` on ``maxclaw serve``: the MCP server over streamable HTTP, stateless.

Every request carries ``Authorization: Bearer <agent token>``; a token bound to a thread fixes
the thread, an unbound one names it with the ``X-MaxClaw-Thread`` header (or ``?thread_id=``)
that the host's MCP configuration sends on every request. The SDK's session manager runs in
stateless mode with JSON responses: no ``Mcp-Session-Id`` is issued, no stream or session is
kept between requests, and each ``tools/call`` reads and writes PostgreSQL through the
services. So two replicas behind a load balancer serve one agent interchangeably — any request
may land on either, and a replica that restarts loses nothing.

Refused tokens count against the client's address as on REST (``Quotas.authenticating``), and
``GET /mcp`` is answered ``405``: the stream it would open carries server-initiated messages,
which a stateless server never sends, and it would stay open for nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import importlib
import json
import logging
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from starlette.types import Receive, Scope, Send

from maxclaw.agentthreads.service import AgentThreadService
from maxclaw.auth.service import AuthService, Principal, parse_uuid
from maxclaw.components.server_tools import ToolService
from maxclaw.errors import (
    BadRequest,
    Forbidden,
    MaxclawError,
    RateLimited,
    Unauthorized,
    Unavailable,
)
from maxclaw.mcp.backend import ServiceBackend
from maxclaw.quotas import Quotas
from maxclaw.turns.messages import AgentMessageService

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

    from maxclaw.wire.mcp import Binding

log = logging.getLogger(__name__)

THREAD_HEADER = "x-maxclaw-thread"
SESSION_HEADER = "mcp-session-id"
STATE_KEY = "maxclaw_mcp"


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


async def _respond(send: Send, exc: MaxclawError) -> None:
    body = json.dumps(exc.body()).encode()
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(body)).encode())]
    if exc.http_status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    if exc.http_status == 405:
        headers.append((b"allow", b"POST"))
    if isinstance(exc, RateLimited):
        headers.append((b"retry-after", str(exc.retry_after_s).encode()))
    await send({"type": "http.response.start", "status": exc.http_status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class MethodNotAllowed(MaxclawError):
    code = "method_not_allowed"
    http_status = 405


NO_STREAM = MethodNotAllowed("This MCP server is stateless: it sends nothing unasked, so it "
                             "opens no stream on GET. Send requests with POST.")


READY_WITHIN_S = 60.0


class McpHttpApp:
    """The ASGI app mounted at ``/mcp``, and a job of the app's lifespan: the SDK's session
    manager runs in a task of its own. The SDK is imported there, off the event loop, so that
    ``serve`` is ready without waiting for it (the import costs ~0.35 s of CPU): at ``start``
    when ``preload`` (``MAXCLAW_MCP_PRELOAD``, the default), else at the first ``/mcp``
    request, which then waits for it once."""

    name = "mcp-http"

    def __init__(self, auth: AuthService, tools: ToolService, messages: AgentMessageService,
                 threads: AgentThreadService, quotas: Quotas, *, preload: bool = True) -> None:
        self.auth = auth
        self.quotas = quotas
        self.tools = tools
        self.messages = messages
        self.threads = threads
        self.preload = preload
        self.manager: StreamableHTTPSessionManager | None = None
        self._ready = asyncio.Event()
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self.preload:
            self._launch()

    def _launch(self) -> None:
        """Run the session manager, once. In a context of its own: launched by a request, the
        task would otherwise carry that request's context (its request id in every log line)."""
        if self._task is None and not self._stopping.is_set():
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=self.name, context=contextvars.Context())

    async def _run(self) -> None:
        began = time.monotonic()
        await asyncio.to_thread(importlib.import_module, "mcp.server.streamable_http_manager")
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

        from maxclaw.wire.mcp import build_server

        self.manager = StreamableHTTPSessionManager(app=build_server(self._resolve),
                                                    stateless=True, json_response=True)
        async with self.manager.run():
            self._ready.set()
            log.info("the MCP endpoint is ready", extra={
                "preload": self.preload, "duration_ms": round((time.monotonic() - began) * 1000)})
            await self._stopping.wait()

    async def stop(self) -> None:
        self._stopping.set()
        if self._task is not None:
            await self._task
            self._task = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        try:
            if scope.get("method") == "GET":
                raise NO_STREAM
            client = scope.get("client")
            who, thread_id = await self.quotas.authenticating(
                client[0] if client else None, lambda: self._authenticate(scope))
            self._launch()  # lazy: the first authenticated request starts it
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._ready.wait(), READY_WITHIN_S)
            if self.manager is None or not self._ready.is_set():
                raise Unavailable("The MCP endpoint is starting; try again in a moment.")
        except MaxclawError as exc:
            await _respond(send, exc)
            return
        session = _headers(scope).get(SESSION_HEADER, "")
        scope.setdefault("state", {})[STATE_KEY] = (who, thread_id, session)
        await self.manager.handle_request(scope, receive, send)

    async def _authenticate(self, scope: Scope) -> tuple[Principal, str]:
        headers = _headers(scope)
        scheme, _, token = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthorized("Missing token: send 'Authorization: Bearer <agent token>'.")
        who: Principal = await self.auth.authenticate(token.strip())
        if who.role != "agent":
            raise Forbidden("/mcp is for agent tokens; this is a user token.")
        named = headers.get(THREAD_HEADER) or _query_thread(scope)
        if who.thread_id is not None:
            if named is not None:
                who.check_thread(parse_uuid(named))  # another thread: 404, as on REST
            return who, who.thread_id
        if named is None:
            raise BadRequest("Name the thread: send the X-MaxClaw-Thread header (or "
                             "?thread_id=), or use a token bound to one thread.")
        return who, parse_uuid(named)

    async def _resolve(self, ctx: ServerRequestContext[Any, Any]) -> Binding:
        request = ctx.request
        state = getattr(request, "scope", {}).get("state", {}).get(STATE_KEY)
        assert state is not None, "every /mcp request is authenticated before it is served"
        who, thread_id, session = state
        from maxclaw.wire.mcp import Binding

        backend = ServiceBackend(who, self.tools, self.messages, self.threads)
        return Binding(backend, thread_id, scope=session)


def _query_thread(scope: Scope) -> str | None:
    values = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("thread_id")
    return values[0] if values else None
