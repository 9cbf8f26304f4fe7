"""Item 1 of the suite: post a card and answer it, three ways, at several concurrencies.

(a) ``bench.floor``: the service's statements sent straight with asyncpg;
(b) the service objects in-process: ``AgentMessageService.post`` → ``ToolService.execute``
    (which calls ``ComponentService.post_card``) → ``ComponentService.answer``;
(c) the HTTP API of a real ``maxclaw serve`` from a separate load process (``bench.http_load``).

Every round trip uses a fresh, idle thread, so the answer does the full work of waking a thread
(a queued turn, the thread's ``turn_state``, their notifications), not the cheaper no-op of a
thread whose turn is already queued.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import asyncpg

from bench import cpu, floor
from bench.dataset import CARD_ARGS
from bench.loop import RoundTrip, Samples, closed_loop
from bench.server import Server
from maxclaw.app import create_app
from maxclaw.auth.service import Principal
from maxclaw.db.database import _init_connection, connect
from maxclaw.db.urls import plain_url
from maxclaw.settings import Settings

# generous ceilings on round trips/s for sizing each point's stock of fresh threads
RATE_CEILING = {1: 1000, 4: 2500, 16: 3000}
STOCK_THREADS = """
INSERT INTO threads (user_id, kind, title)
SELECT $1::uuid, 'normal', 'round trip ' || g FROM generate_series(1, $2) g
RETURNING id::text
"""


@dataclass
class Identity:
    """One benchmark user: its id and its user and agent tokens."""

    name: str
    user_id: str
    user_token: str
    agent_token: str

    def principal(self, role: str) -> Principal:
        return Principal(user_id=self.user_id, name=self.name, role=role)  # type: ignore[arg-type]


class Stock:
    """A client's fresh threads; wrapping around (a reused thread) is counted and reported."""

    def __init__(self, threads: list[str]) -> None:
        self.threads = threads
        self.used = 0
        self.reused = 0

    def take(self) -> str:
        i = self.used
        self.used += 1
        if i >= len(self.threads):
            self.reused += 1
        return self.threads[i % len(self.threads)]


def stock_size(clients: int, seconds: float, rate: float | None = None) -> int:
    """Threads each client needs for ``seconds`` at (a ceiling of) the expected rate."""
    ceiling = rate * 1.5 if rate else RATE_CEILING.get(clients, 3000)
    return math.ceil(ceiling * seconds / clients) + 20


async def make_stocks(url: str, identities: list[Identity], per_client: int) -> list[Stock]:
    conn = await connect(url)
    try:
        stocks = []
        for ident in identities:
            async with conn.transaction():
                await conn.execute("SET LOCAL maxclaw.notify = 'off'")
                rows = await conn.fetch(STOCK_THREADS, ident.user_id, per_client)
            stocks.append(Stock([r["id"] for r in rows]))
        return stocks
    finally:
        await conn.close()


def in_process_settings(url: str, pool_max: int = 20) -> Settings:
    """The app as ``serve`` builds it, with its background jobs off (nothing else competes)."""
    return Settings(database_url=url, run_sweeper=False, run_push_dispatcher=False,
                    run_listener=False, db_pool_min=1, db_pool_max=pool_max, log_json=True,
                    log_level="WARNING")


@asynccontextmanager
async def in_process(url: str, pool_max: int = 20) -> AsyncIterator[Any]:
    """The service objects of one app, pool open; yields ``Services``."""
    app = create_app(in_process_settings(url, pool_max))
    async with app.router.lifespan_context(app):
        yield app.state.services


async def make_identities(services: Any, tag: str, count: int) -> list[Identity]:
    out = []
    for i in range(count):
        name = f"rt{tag}_{i}"
        user_id, _ = await services.auth.create_user(name)
        out.append(Identity(name, user_id, await services.auth.create_token(name, "user"),
                            await services.auth.create_token(name, "agent")))
    return out


async def metered(url: str, groups: dict[str, list[int]],
                  run: Callable[[], Awaitable[Samples]]) -> Samples:
    """Run a point and attach the CPU per round trip of the database's backends and ``groups``.

    Backends are listed again at the end, so connections opened meanwhile count too."""
    conn = await connect(url)
    try:
        meter = cpu.Meter()
        meter.start([*await cpu.backend_pids(conn), *(p for g in groups.values() for p in g)])
        samples = await run()
        used = meter.stop({"postgres": await cpu.backend_pids(conn), **groups})
    finally:
        await conn.close()
    samples.cpu_ms = cpu.per_round_trip_ms(used, samples.completed)
    return samples


class ReplayFloor:
    """``bench.floor``'s replay of the recorded service statements, as a floor ``impl``."""

    def __init__(self, script: floor.Script, after_commit: str | None = None) -> None:
        self.script = script
        self.after_commit = after_commit

    async def post(self, conn: Any, user_id: str, thread_id: str, call_id: str) -> Any:
        return await floor.post(conn, self.script, user_id, thread_id, call_id,
                                self.after_commit)

    async def answer(self, conn: Any, handle: Any) -> None:
        await floor.answer(conn, handle)


async def floor_connect(url: str) -> Any:
    """A floor client's connection: the project's codecs and, like the service's pool, a
    statement cache (``maxclaw.db.database.connect`` has none, for PgBouncer; without one every
    replayed statement was parsed and planned again, and the floor ran slower than the
    service it is the floor of)."""
    conn = await asyncpg.connect(plain_url(url), statement_cache_size=100)
    await _init_connection(conn)
    return conn


async def floor_point(url: str, identities: list[Identity], stocks: list[Stock], tag: str,
                      warmup: float, duration: float, impl: Any,
                      setup: str | None = None) -> Samples:
    """(a): one dedicated asyncpg connection per client; ``impl`` has ``post(conn, user,
    thread, call id) -> handle`` and ``answer(conn, handle)`` (``ReplayFloor``, or a
    prototype); ``setup`` runs once on each connection."""
    conns = [await floor_connect(url) for _ in stocks]
    for conn in conns:
        if setup:
            await conn.execute(setup)

    def client(n: int) -> RoundTrip:
        conn, ident, stock, seq = conns[n], identities[n], stocks[n], itertools.count()

        async def round_trip() -> tuple[float, float]:
            thread = stock.take()
            t0 = time.perf_counter()
            handle = await impl.post(conn, ident.user_id, thread, f"{tag}c{n}_{next(seq)}")
            t1 = time.perf_counter()
            await impl.answer(conn, handle)
            t2 = time.perf_counter()
            return t2 - t0, t2 - t1

        return round_trip

    try:
        return await metered(url, {"python": [cpu.own_pid()]}, lambda: closed_loop(
            [client(n) for n in range(len(stocks))], warmup, duration))
    finally:
        for conn in conns:
            await conn.close()


def assistant_row(call_id: str, execute: bool = False) -> dict[str, Any]:
    """The agent's assistant row carrying one ``ask_user_question`` call."""
    row: dict[str, Any] = {
        "role": "assistant", "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": {
            "name": "ask_user_question", "arguments": json.dumps(CARD_ARGS)}}]}
    if execute:
        row["execute"] = True
    return row


async def executes_in_post(services: Any, ident: Identity, thread: str, call_id: str) -> bool:
    """Post a card with ``"execute": true``; whether the service ran the tool in the post (the
    code measured may predate it: then the call is executed separately, and False)."""
    agent = ident.principal("agent")
    got = await services.agent_messages.post(agent, thread, assistant_row(call_id, True))
    if got.get("results"):
        return True
    await services.tools.execute(agent, thread, call_id)
    return False


def service_round_trip(services: Any, ident: Identity, stock: Stock, prefix: str,
                       execute_in_post: bool = False) -> RoundTrip:
    """(b): one round trip through the service objects the HTTP routes call; the post carries
    ``"execute": true`` when ``execute_in_post``, else ``execute`` is called after it."""
    agent, user, seq = ident.principal("agent"), ident.principal("user"), itertools.count()

    async def round_trip() -> tuple[float, float]:
        thread = stock.take()
        call_id = f"{prefix}_{next(seq)}"
        t0 = time.perf_counter()
        got = await services.agent_messages.post(agent, thread,
                                                 assistant_row(call_id, execute_in_post))
        if execute_in_post:
            status, error = got["results"][0]["status"], got["results"][0].get("error")
        else:
            status, _content, error = await services.tools.execute(agent, thread, call_id)
        if status != 200:
            raise RuntimeError(f"execute: {status} {error}")
        t1 = time.perf_counter()
        await services.components.answer(user, f"{call_id}:q1", ["keep"], None, "card")
        t2 = time.perf_counter()
        return t2 - t0, t2 - t1

    return round_trip


async def service_point(url: str, services: Any, identities: list[Identity], stocks: list[Stock],
                        tag: str, warmup: float, duration: float,
                        execute_in_post: bool = False) -> Samples:
    clients = [service_round_trip(services, identities[n], stocks[n], f"{tag}c{n}",
                                  execute_in_post) for n in range(len(stocks))]
    return await metered(url, {"python": [cpu.own_pid()]},
                         lambda: closed_loop(clients, warmup, duration))


async def http_point(url: str, server: Server, identities: list[Identity], stocks: list[Stock],
                     tag: str, warmup: float, duration: float,
                     execute_in_post: bool = False) -> tuple[Samples, int]:
    """(c): a separate load process against the real server; returns samples, reused threads.
    ``execute_in_post`` (mode x): two requests per round trip, the post carrying
    ``"execute": true``, instead of three."""
    extra: dict[str, Any] = {}

    async def load() -> Samples:
        samples, extra["reused"], extra["load_cpu"] = await asyncio.to_thread(
            _http_load, server, identities, stocks, tag, warmup, duration, execute_in_post)
        return samples

    samples = await metered(url, {"server": [server.proc.pid]}, load)
    # the load process measured its own CPU (it has exited by now)
    samples.cpu_ms["load"] = round(extra["load_cpu"] * 1000 / max(samples.completed, 1), 3)
    samples.cpu_ms["total"] = round(samples.cpu_ms["total"] + samples.cpu_ms["load"], 3)
    return samples, int(extra["reused"])


def _http_load(server: Server, identities: list[Identity], stocks: list[Stock], tag: str,
               warmup: float, duration: float,
               execute_in_post: bool = False) -> tuple[Samples, int, float]:
    job = {"host": "127.0.0.1", "port": server.port, "tag": tag, "warmup": warmup,
           "duration": duration, "card": CARD_ARGS, "execute_in_post": execute_in_post,
           "clients": [{"user_token": identities[n].user_token,
                        "agent_token": identities[n].agent_token,
                        "threads": stocks[n].threads} for n in range(len(stocks))]}
    proc = subprocess.run([sys.executable, "-m", "bench.http_load"], input=json.dumps(job),
                          capture_output=True, text=True, timeout=warmup + duration + 120,
                          check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"the HTTP load process failed:\n{proc.stderr[-3000:]}")
    data = json.loads(proc.stdout)
    return Samples.from_json(data), int(data["reused_threads"]), float(data["load_cpu_s"])


def run_async(coro: Any) -> Any:
    """Run on uvloop, as ``maxclaw serve`` does (uvicorn picks uvloop when installed)."""
    try:
        import uvloop

        return uvloop.run(coro)
    except ImportError:
        return asyncio.run(coro)
