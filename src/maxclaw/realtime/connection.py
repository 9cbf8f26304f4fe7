"""One client's WebSocket session: auth, ops, its catch-up, presence, and its send queue.

Three tasks per connection: the reader (this coroutine: ops in, replies queued), the writer
(drains the send queue to the socket, so the hub never waits on a client) and, while a
subscription is catching up, its catch-up reader. Every frame goes through the one queue, so a
client sees frames in the order they were queued.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol

from starlette.websockets import WebSocket

from maxclaw.auth.service import AuthService, Principal, parse_uuid
from maxclaw.clock import Clock
from maxclaw.db.database import Database, finish_even_if_cancelled
from maxclaw.errors import NotFound, RateLimited, Unauthorized, Unavailable
from maxclaw.presence.service import PresenceService
from maxclaw.quotas import Quotas
from maxclaw.realtime import frames, store
from maxclaw.realtime.cursor import ORIGIN, CursorError, Position, decode
from maxclaw.realtime.hub import RealtimeHub, Subscription
from maxclaw.realtime.sendqueue import SendQueue

log = logging.getLogger("maxclaw.realtime")

CLOSE_BAD_TOKEN = 4401
CLOSE_AGENT_TOKEN = 4403
CLOSE_TOO_SLOW = 4408
CLOSE_RATE_LIMITED = 4429  # a quota (sockets per user, refused tokens per address) is used up
CLOSE_TRY_AGAIN = 1013  # the database is down: the client should reconnect later
CLOSE_INTERNAL = 1011
TOO_SLOW_REASON = "too slow to keep up: reconnect and subscribe with your last cursor"
MAX_FRAME_CHARS = 64 * 1024
MAX_THREADS = 500
CLOSE_TIMEOUT_S = 10.0


def _token(ws: WebSocket) -> str | None:
    """The bearer token from the Authorization header, else the ``token`` query parameter."""
    scheme, _, value = ws.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return ws.query_params.get("token") or None


def _thread_filter(threads: list[str]) -> frozenset[str]:
    """Canonical thread ids; a malformed id names no thread, so it simply matches nothing."""
    ids = set()
    for raw in threads:
        with contextlib.suppress(NotFound):
            ids.add(parse_uuid(raw))
    return frozenset(ids)


class ConnectionServices(Protocol):
    """What a connection uses of the process's services (``composition.Services`` has them;
    a protocol, so realtime does not import the composition root that builds it)."""

    @property
    def clock(self) -> Clock: ...

    @property
    def auth(self) -> AuthService: ...

    @property
    def db(self) -> Database: ...

    @property
    def presence(self) -> PresenceService: ...

    @property
    def realtime(self) -> RealtimeHub: ...

    @property
    def quotas(self) -> Quotas: ...


class Connection:
    """Serves one accepted WebSocket until it closes."""

    def __init__(self, ws: WebSocket, services: ConnectionServices) -> None:
        self.ws = ws
        self.services = services
        self.hub: RealtimeHub = services.realtime
        self.id = f"{self.hub.replica}:{uuid.uuid4().hex}"
        self.queue = SendQueue(self.hub.queue_max_chars)
        self.who: Principal | None = None
        self.sub: Subscription | None = None
        self._catch_up: asyncio.Task[None] | None = None
        self._writer: asyncio.Task[None] | None = None
        self._presence: asyncio.Task[None] | None = None
        self._closer: asyncio.Task[None] | None = None
        self._presence_lock = asyncio.Lock()
        self._focused = False
        self._focus: str | None = None
        self._closing = False
        self._unwatch: Callable[[], None] = lambda: None

    async def run(self) -> None:
        """Accept, authenticate, then serve ops until the client goes."""
        await self.ws.accept()  # accept first, so browsers see our close code
        self.who = await self._authenticate()
        if self.who is None:
            return
        try:
            slot = self.services.quotas.socket(self.who.user_id)
            slot.__enter__()
        except RateLimited as exc:
            self._unwatch()
            await self.ws.close(CLOSE_RATE_LIMITED, f"{exc.message} (retry after "
                                                    f"{exc.retry_after_s} s)")
            return
        try:
            self._writer = asyncio.create_task(self._write(), name="ws-writer")
            await self.queue.put(frames.hello(self.services.clock.now()))
            try:
                await self._read()
            finally:
                await self._cleanup()
        finally:
            slot.__exit__(None, None, None)

    async def _authenticate(self) -> Principal | None:
        address = self.ws.client.host if self.ws.client else None
        ticket = self.ws.query_params.get("ticket")

        async def attempt() -> Principal:
            if ticket:
                return await self.services.auth.redeem_ticket(ticket)
            return await self.services.auth.authenticate(_token(self.ws))

        try:
            who = await self.services.quotas.authenticating(address, attempt)
        except RateLimited as exc:
            await self.ws.close(CLOSE_RATE_LIMITED, f"{exc.message} (retry after "
                                                    f"{exc.retry_after_s} s)")
            return None
        except Unauthorized:
            await self.ws.close(CLOSE_BAD_TOKEN, "bad or missing token")
            return None
        except Unavailable:
            await self.ws.close(CLOSE_TRY_AGAIN, "the database is unavailable; retry shortly")
            return None
        if who.role != "user":
            await self.ws.close(CLOSE_AGENT_TOKEN,
                                "the WebSocket is for user clients; use a user token")
            return None
        # a revoke (on any replica) closes this socket at once
        unwatch = self.services.auth.on_revoke(
            who, lambda: self._start_close(CLOSE_BAD_TOKEN, "token revoked"))
        expiry = self._close_at_expiry(who)

        def stop_watching() -> None:
            unwatch()
            if expiry is not None:
                expiry.cancel()

        self._unwatch = stop_watching
        return who

    def _close_at_expiry(self, who: Principal) -> asyncio.TimerHandle | None:
        """Close this socket when its token expires: a token is checked when the socket
        opens, so without this timer an expired token would go on receiving frames. The
        timer runs on the replica that serves the socket, so every replica closes its own."""
        if who.expires_at is None:
            return None
        delay = max(0.0, (who.expires_at - datetime.now(UTC)).total_seconds())
        return asyncio.get_running_loop().call_later(
            delay, self._start_close, CLOSE_BAD_TOKEN, "token expired")

    # -- frames in ----------------------------------------------------------------------

    async def _read(self) -> None:
        while True:
            message = await self.ws.receive()
            if message["type"] == "websocket.disconnect":
                return
            text = message.get("text")
            if text is None:
                await self._error("bad_request", "Send frames as JSON text, not binary.")
            elif len(text) > MAX_FRAME_CHARS:
                await self._error("too_large", f"A frame is at most {MAX_FRAME_CHARS} characters.")
            else:
                try:
                    await self._handle(text)
                except Unavailable:
                    await self._error("unavailable", "The database is unavailable; retry shortly.")
                except Exception:  # a bug in one op must not take the connection down
                    log.exception("realtime op failed", extra={"code": "internal"})
                    await self._error("internal",
                                      "Something went wrong on our side; it was logged.")

    async def _handle(self, text: str) -> None:
        try:
            frame = json.loads(text)
        except ValueError:
            await self._error("bad_request", "The frame is not valid JSON.")
            return
        op = frame.get("op") if isinstance(frame, dict) else None
        if op == "ping":
            await self.queue.put(frames.PONG)
        elif op == "subscribe":
            await self._subscribe(frame)
        elif op == "focus":
            await self._on_focus(frame)
        elif isinstance(op, str):
            await self._error("bad_request",
                              f"Unknown op {op[:40]!r}: use subscribe, focus or ping.")
        else:
            await self._error("bad_request",
                              'A frame is a JSON object with an "op": subscribe, focus or ping.')

    async def _error(self, code: str, message: str) -> None:
        await self.queue.put(frames.error(code, message))

    # -- subscribe ----------------------------------------------------------------------

    async def _subscribe(self, frame: dict[str, Any]) -> None:
        cursor, threads = frame.get("cursor"), frame.get("threads")
        if cursor is not None and not isinstance(cursor, str):
            await self._error("invalid", "cursor must be null or a cursor string from a frame.")
            return
        if threads is not None and (not isinstance(threads, list) or len(threads) > MAX_THREADS
                                    or not all(isinstance(t, str) for t in threads)):
            await self._error(
                "invalid", f"threads must be null or a list of at most {MAX_THREADS} thread ids.")
            return
        try:
            position = ORIGIN if cursor is None else decode(cursor)
        except CursorError:
            await self.queue.put(frames.RESYNC)
            return
        await self._unsubscribe()  # a second subscribe replaces the first
        scope = None if threads is None else _thread_filter(threads)
        self._catch_up = asyncio.create_task(
            self._catch_up_then_join(position, scope, check=cursor is not None),
            name="ws-catch-up")

    async def _unsubscribe(self) -> None:
        if self._catch_up is not None:
            self._catch_up.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._catch_up
            self._catch_up = None
        if self.sub is not None:
            self.hub.detach(self.sub)
            self.sub = None

    async def _catch_up_then_join(self, position: Position, scope: frozenset[str] | None,
                                  *, check: bool) -> None:
        """Send what the client lacks, then ``synced``, then hand the socket to the hub."""
        assert self.who is not None
        user = self.who.user_id
        try:
            if check:
                bounds = await finish_even_if_cancelled(self._bounds())
                if position.xid > bounds.xid or position.rev > bounds.rev:
                    await self.queue.put(frames.RESYNC)  # not a position of this database
                    return
            sent, limit = 0, self.hub.catch_up_page_size
            while True:
                # one pooled connection per page, returned before we wait on a slow client;
                # a page is at most the byte budget (or one bigger row): a catch-up over many
                # 1 MiB rows is many small reads, each frame queued as the client makes room;
                # within the user's share of the pool, so one user's sockets cannot take it all;
                # a client leaving mid-read does not cancel the statement (it finishes unread)
                page = await finish_even_if_cancelled(self._page(user, position, scope, limit))
                for change in page.changes:
                    await self.queue.put(frames.record_frame(change))
                sent += len(page.changes)
                position = max(position, page.end)
                if page.complete:
                    break
                limit = store.next_limit(page, self.hub.catch_up_page_size)
            self.hub.metrics.frames.labels("catch-up").inc(sent)
            await self.queue.put(frames.synced(position))
            # no await between here and attach: the hub reads for the socket from `position`
            self.sub = Subscription(user, scope, position, self.queue, self._overflowed)
            self.hub.attach(self.sub)
        except Unavailable:
            await self._error("unavailable", "The database is unavailable; reconnect shortly.")
            self._start_close(CLOSE_TRY_AGAIN, "the database is unavailable; retry shortly")
        except Exception:  # e.g. a statement timeout: never leave the client waiting for synced
            log.exception("realtime catch-up failed", extra={"code": "internal"})
            await self._error("internal", "The catch-up failed; reconnect with your last cursor.")
            self._start_close(CLOSE_INTERNAL, "catch-up failed; reconnect with your last cursor")

    async def _bounds(self) -> Position:
        async with self.services.db.connection() as conn:
            return await store.cursor_bounds(conn)

    async def _page(self, user: str, position: Position, scope: frozenset[str] | None,
                    limit: int) -> store.Changes:
        """One page of the catch-up: a pooled connection taken and given back around it."""
        async with self.services.db.connection(share=user) as conn:
            return await store.read_changes(conn, [user], position,
                                            threads=None if scope is None else list(scope),
                                            limit=limit, max_bytes=self.hub.batch_bytes)

    # -- focus (presence) ---------------------------------------------------------------

    async def _on_focus(self, frame: dict[str, Any]) -> None:
        assert self.who is not None
        if "thread_id" not in frame or not (frame["thread_id"] is None
                                            or isinstance(frame["thread_id"], str)):
            await self._error("invalid", "focus needs thread_id: a thread id or null.")
            return
        try:
            thread_id = None if frame["thread_id"] is None else parse_uuid(frame["thread_id"])
            async with self._presence_lock:
                await self.services.presence.focus(self.id, self.who.user_id, thread_id)
                self._focused, self._focus = True, thread_id
        except NotFound:
            await self._error("not_found", "No such thread.")
            return
        except Unavailable:
            await self._error("unavailable", "The database is unavailable; retry shortly.")
            return
        if self._presence is None:
            self._presence = asyncio.create_task(self._refresh_presence(), name="ws-presence")
        await self.queue.put(frames.focus_ok(thread_id))

    async def _refresh_presence(self) -> None:
        """Keep this connection's presence row alive while it is open (it expires by TTL)."""
        assert self.who is not None
        interval = max(self.services.presence.ttl.total_seconds() / 3, 0.05)
        while True:
            await asyncio.sleep(interval)  # a timer, not a synchronisation
            try:
                async with self._presence_lock:
                    await self.services.presence.focus(self.id, self.who.user_id, self._focus)
            except NotFound:  # the thread went away: keep the connection present, unfocused
                async with self._presence_lock:
                    self._focus = None
            except Unavailable:
                log.warning("presence refresh failed", extra={"user_id": self.who.user_id})

    # -- frames out and closing ---------------------------------------------------------

    async def _write(self) -> None:
        try:
            while True:
                await self.ws.send_text(await self.queue.get())
        except asyncio.CancelledError:
            raise
        except Exception:  # the client went away; the reader sees the disconnect
            return
        finally:
            self.queue.close()  # nobody drains it any more: never let a put wait forever

    def _overflowed(self) -> None:
        """Called by the hub (synchronously) when this client's backlog stays over the bound."""
        assert self.who is not None
        log.info("realtime client too slow; closing",
                 extra={"user_id": self.who.user_id, "code": CLOSE_TOO_SLOW})
        self.sub = None
        self._start_close(CLOSE_TOO_SLOW, TOO_SLOW_REASON)

    def _start_close(self, code: int, reason: str) -> None:
        if self._closing:
            return
        self._closing = True
        self._closer = asyncio.create_task(self._close(code, reason), name="ws-close")

    async def _close(self, code: int, reason: str) -> None:
        # frames still queued are dropped: the client resumes from the last cursor it received
        if self._writer is not None:
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.ws.close(code, reason), CLOSE_TIMEOUT_S)

    async def _cleanup(self) -> None:
        self._closing = True
        self._unwatch()
        await self._unsubscribe()
        for task in (self._presence, self._writer):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self._closer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._closer, CLOSE_TIMEOUT_S)
        if self._focused and self.who is not None:  # focus needs a principal
            try:
                await self.services.presence.leave(self.id, self.who.user_id)
            except Unavailable:  # the row lapses by its TTL
                log.warning("presence leave failed", extra={"code": "unavailable"})
