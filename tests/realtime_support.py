"""Helpers for the realtime tests: the app served in-process by uvicorn (so a test can reach its
hub), a WebSocket client that applies frames to local state the way a real client does, and a
REST fetch of the same state to compare with (zulip's "snapshot + events == fresh fetch")."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx
import uvicorn
from websockets.asyncio.client import ClientConnection, connect

from maxclaw.app import create_app
from tests.conftest import app_settings, free_port
from tests.local_http import LOCAL_TLS

Key = tuple[str, Any]  # (table, record id)
State = dict[Key, dict[str, Any]]


@dataclass
class User:
    name: str
    user_id: str
    main_thread_id: str
    token: str
    agent_token: str
    http: httpx.AsyncClient
    agent: httpx.AsyncClient


@dataclass
class LiveServer:
    """A real HTTP + WebSocket server on a free port, with its services in reach."""

    app: Any
    services: Any
    base_url: str
    opened: list[httpx.AsyncClient] = field(default_factory=list)

    @property
    def ws_url(self) -> str:
        return self.base_url.replace("http://", "ws://") + "/v1/ws"

    def http(self, token: str | None) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        client = httpx.AsyncClient(base_url=self.base_url, headers=headers, timeout=30,
                                   verify=LOCAL_TLS)
        self.opened.append(client)  # closed when the server stops
        return client

    async def user(self, name: str) -> User:
        return await make_user(self.services, self.http, name)

    async def client(self, token: str, **kwargs: Any) -> Client:
        return await Client.open(self.ws_url, token, **kwargs)


async def make_user(services: Any, http: Callable[[str], httpx.AsyncClient], name: str) -> User:
    user_id, main = await services.auth.create_user(name)
    token = await services.auth.create_token(name, "user")
    # the household's one runtime, Main's included (the fence: tests/trust/test_main_fence.py)
    agent = await services.auth.create_token(name, "agent", for_main=True)
    return User(name, user_id, main, token, agent, http(token), http(agent))


@asynccontextmanager
async def live_server(database_url: str, **overrides: Any) -> AsyncIterator[LiveServer]:
    """``create_app`` served by uvicorn in this event loop, the realtime hub running."""
    settings = app_settings(database_url, **{"run_listener": True, **overrides})
    app = create_app(settings)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None,
                                           ws="websockets-sansio", lifespan="on"))
    task = asyncio.create_task(server.serve())
    deadline = time.monotonic() + 20
    while not server.started:  # uvicorn offers no event to await for "listening"
        if task.done():
            task.result()
            raise RuntimeError("uvicorn stopped during startup")
        if time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        await asyncio.sleep(0.01)
    live = LiveServer(app, app.state.services, f"http://127.0.0.1:{port}")
    try:
        yield live
    finally:
        for client in live.opened:
            await client.aclose()
        server.should_exit = True
        await task


class Client:
    """A user client: every frame it received, the cursor it would resume from, and its state
    (each record at the highest rev seen; a frame with a rev not above the held one is ignored,
    as ``api.md`` tells clients to do)."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.frames: list[dict[str, Any]] = []
        self.state: State = {}
        self.cursor: str | None = None
        self.hello: dict[str, Any] | None = None

    @classmethod
    async def open(cls, ws_url: str, token: str, *, in_query: bool = False,
                   max_queue: int | None = 16) -> Client:
        if in_query:
            ws = await connect(f"{ws_url}?token={token}", max_queue=max_queue,
                               max_size=None)
        else:
            ws = await connect(ws_url, additional_headers={"Authorization": f"Bearer {token}"},
                               max_queue=max_queue, max_size=None)
        client = cls(ws)
        client.hello = await client.recv()
        assert client.hello["type"] == "hello", client.hello
        return client

    async def close(self) -> None:
        await self.ws.close()

    async def send(self, frame: Any) -> None:
        await self.ws.send(frame if isinstance(frame, str) else json.dumps(frame))

    async def recv(self, wait_s: float = 15.0) -> dict[str, Any]:
        frame: dict[str, Any] = json.loads(await asyncio.wait_for(self.ws.recv(), wait_s))
        self.frames.append(frame)
        if frame["type"] == "record.upsert":
            self.apply(frame)
        if "cursor" in frame:
            self.cursor = frame["cursor"]
        return frame

    def apply(self, frame: dict[str, Any]) -> None:
        key = (frame["table"], frame["record"]["id"])
        held = self.state.get(key)
        if held is None or frame["rev"] > held["rev"]:
            self.state[key] = frame["record"]

    async def subscribe(self, cursor: str | None = None, threads: list[str] | None = None,
                        wait_s: float = 15.0) -> list[dict[str, Any]]:
        """Subscribe and read up to ``synced``; returns the catch-up frames (without it)."""
        start = len(self.frames)
        await self.send({"op": "subscribe", "cursor": cursor, "threads": threads})
        while (await self.recv(wait_s))["type"] != "synced":
            pass
        return self.frames[start:-1]

    async def reply(self, frame: Any, wait_s: float = 15.0) -> dict[str, Any]:
        """Send an op and return the first frame that is not a record (records are applied)."""
        await self.send(frame)
        while True:
            got = await self.recv(wait_s)
            if got["type"] != "record.upsert":
                return got

    async def until(self, done: Callable[[], bool], wait_s: float = 15.0) -> None:
        """Read frames until ``done()`` holds (``TimeoutError`` after ``wait_s`` seconds)."""
        deadline = time.monotonic() + wait_s
        while not done():
            await self.recv(max(deadline - time.monotonic(), 0.001))

    async def drain(self) -> None:
        """Everything the server queued before now has been read: a ping's pong comes after."""
        pong = await self.reply({"op": "ping"})
        assert pong == {"type": "pong"}, pong

    def holds(self, expected: State) -> bool:
        """Whether every expected record is held at (at least) its expected rev."""
        return all(key in self.state and self.state[key]["rev"] >= rec["rev"]
                   for key, rec in expected.items())

    async def converge(self, expected: State, wait_s: float = 15.0) -> None:
        """Read until the client holds ``expected``, then require exact equality."""
        with contextlib.suppress(TimeoutError):  # the assertion below shows what is missing
            await self.until(lambda: self.holds(expected), wait_s)
        assert_same_state(self.state, expected)


_RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")


def normalized(value: Any) -> Any:
    """Timestamps as instants: REST spells UTC both "Z" and "+00:00" (both RFC 3339)."""
    if isinstance(value, dict):
        return {k: normalized(v) for k, v in value.items()}
    if isinstance(value, list):
        return [normalized(v) for v in value]
    if isinstance(value, str) and _RFC3339.match(value):
        return datetime.fromisoformat(value)
    return value


def assert_same_state(held: State, expected: State) -> None:
    held, expected = normalized(held), normalized(expected)
    missing = sorted(str(k) for k in expected.keys() - held.keys())
    extra = sorted(str(k) for k in held.keys() - expected.keys())
    differ = sorted(str(k) for k in expected.keys() & held.keys() if held[k] != expected[k])
    assert not (missing or extra or differ), (
        f"missing {missing[:10]} ({len(missing)}), extra {extra[:10]} ({len(extra)}), "
        f"different {differ[:10]} ({len(differ)}): "
        + "; ".join(f"{k}: held {held[k]} != {expected[k]}"
                    for k in list(expected.keys() & held.keys())[:3] if held[k] != expected[k]))


async def rest_state(http: httpx.AsyncClient) -> State:
    """Threads, every message of each, and every decision, as REST serves them now."""
    state: State = {}
    threads = await http.get("/v1/threads", params={"limit": 500})
    assert threads.status_code == 200, threads.text
    for thread in threads.json()["threads"]:
        state[("threads", thread["id"])] = thread
        after = 0
        while True:
            page = await http.get(f"/v1/threads/{thread['id']}/messages",
                                  params={"after_id": after, "limit": 500})
            assert page.status_code == 200, page.text
            body = page.json()
            for message in body["messages"]:
                state[("messages", message["id"])] = message
            # a page ends at 500 rows or at the server's byte budget: follow next_after_id
            if body["next_after_id"] is None:
                break
            after = body["next_after_id"]
    decisions = await http.get("/v1/decisions", params={"status": "all", "limit": 500})
    assert decisions.status_code == 200, decisions.text
    for decision in decisions.json()["decisions"]:
        state[("decisions", decision["id"])] = decision
    return state
