"""Local stand-ins for push receivers: a real HTTP server on 127.0.0.1 that records every
request and answers from a script (fail the first N, fail forever, or succeed)."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from aiohttp import web


@dataclass
class Hit:
    path: str
    headers: dict[str, str]
    body: bytes
    status: int


@dataclass
class Endpoint:
    """``async with Endpoint(fail_first=3) as ep``: ``ep.url`` takes POSTs on any path."""

    fail_first: int = 0
    fail_status: int = 500
    fail_forever: bool = False
    hits: list[Hit] = field(default_factory=list)
    _runner: web.AppRunner | None = None
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> Endpoint:
        app = web.Application()
        app.router.add_route("POST", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        failing = self.fail_forever or len(self.hits) < self.fail_first
        status = self.fail_status if failing else 201
        async with self._changed:
            self.hits.append(Hit(request.path, dict(request.headers), body, status))
            self._changed.notify_all()
        return web.Response(status=status, text="try later" if failing else "")

    def delivered(self) -> Counter[str]:
        """How many 2xx answers each idempotency key got."""
        return Counter(h.headers.get("Idempotency-Key", "") for h in self.hits
                       if 200 <= h.status < 300)

    async def wait_delivered(self, keys: int, timeout: float = 60.0) -> None:
        """Until ``keys`` distinct idempotency keys were answered 2xx."""
        async with self._changed:
            await asyncio.wait_for(
                self._changed.wait_for(lambda: len(self.delivered()) >= keys), timeout)

    async def wait_hits(self, count: int, timeout: float = 60.0) -> None:
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: len(self.hits) >= count),
                                   timeout)


class ManualClock:
    """A clock the test moves; the dispatcher reads it for claims, leases and retries."""

    def __init__(self, at: datetime) -> None:
        self.at = at

    def now(self) -> datetime:
        return self.at

    def advance(self, seconds: float) -> None:
        self.at += timedelta(seconds=seconds)


async def insert_decision(conn: Any, user_id: str, thread_id: str, component_id: str, *,
                          options: list[dict[str, Any]] | None = None, allow_text: bool = False,
                          sensitive: bool = False, body: str = "Which one?") -> dict[str, Any]:
    """A decisions row as the decisions store writes it (for outbox tests without cards)."""
    row = await conn.fetchrow(
        """INSERT INTO decisions (user_id, kind, dedupe_key, component_id, thread_id, title,
                                  body, options, allow_text, sensitive)
           VALUES ($1, 'agent-question', $2, $3, $4, 'Card', $5, $6, $7, $8) RETURNING *""",
        user_id, f"ask:{component_id}", component_id, thread_id, body, options or [],
        allow_text, sensitive)
    out = dict(row)
    out["thread_id"] = str(out["thread_id"])
    return out
