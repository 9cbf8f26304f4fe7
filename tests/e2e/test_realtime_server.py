"""The WebSocket on real ``maxclaw serve`` processes: close codes, two replicas on one database
behaving as one, a killed LISTEN backend under load, and secret bodies."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import asyncpg
import httpx
import pytest
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

from maxclaw.auth.service import AuthService
from maxclaw.db.database import Database, connect
from maxclaw.realtime import store
from tests.cards import CHOICE, new_thread, post_card
from tests.conftest import ServerProcess, start_server
from tests.local_http import LOCAL_TLS
from tests.realtime_support import Client, User, make_user, rest_state


class Cluster:
    """Server processes on one database, and HTTP clients to close at the end."""

    def __init__(self, database_url: str, tmp_path: Path) -> None:
        self.database_url = database_url
        self.tmp_path = tmp_path
        self.servers: list[ServerProcess] = []
        self.clients: list[httpx.AsyncClient] = []

    def start(self, **env: str) -> ServerProcess:
        n = len(self.servers)
        server = start_server(self.database_url, self.tmp_path / f"serve{n}.log",
                              env={f"MAXCLAW_{k.upper()}": v for k, v in env.items()})
        self.servers.append(server)
        return server

    def http(self, server: ServerProcess, token: str) -> httpx.AsyncClient:
        client = httpx.AsyncClient(base_url=server.base_url, timeout=30, verify=LOCAL_TLS,
                                   headers={"Authorization": f"Bearer {token}"})
        self.clients.append(client)
        return client

    async def user(self, name: str, via: ServerProcess) -> User:
        db = Database(self.database_url, min_size=1, max_size=2)
        await db.open()
        try:
            services = SimpleNamespace(auth=AuthService(db))
            return await make_user(services, lambda token: self.http(via, token), name)
        finally:
            await db.close()

    @staticmethod
    def ws_url(server: ServerProcess) -> str:
        return server.base_url.replace("http://", "ws://") + "/v1/ws"

    async def close(self) -> None:
        for client in self.clients:
            await client.aclose()
        for server in self.servers:
            server.stop()


@pytest.fixture
async def cluster(database_url: str, tmp_path: Path) -> AsyncIterator[Cluster]:
    c = Cluster(database_url, tmp_path)
    yield c
    await c.close()


@pytest.fixture
def log_text(tmp_path: Path) -> Any:
    return lambda: "\n".join(p.read_text(errors="replace") for p in tmp_path.glob("serve*.log"))


async def close_code(url: str, headers: dict[str, str] | None = None) -> int:
    async with ws_connect(url, additional_headers=headers or {}) as ws:
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), 10)
    assert closed.value.rcvd is not None
    return closed.value.rcvd.code


async def test_close_codes_on_the_real_server(cluster: Cluster) -> None:
    server = cluster.start()
    max_ = await cluster.user("max", server)
    url = cluster.ws_url(server)
    assert await close_code(url) == 4401
    assert await close_code(url + "?token=wrong") == 4401
    assert await close_code(url, {"Authorization": f"Bearer {max_.agent_token}"}) == 4403
    client = await Client.open(url, max_.token, in_query=True)
    assert await client.reply({"op": "ping"}) == {"type": "pong"}
    error = await client.reply("{oops")
    assert error["type"] == "error"
    assert await client.reply({"op": "ping"}) == {"type": "pong"}
    await client.close()


async def test_two_replicas_behave_as_one(cluster: Cluster) -> None:
    a, b = cluster.start(), cluster.start()
    max_on_a = await cluster.user("max", a)
    max_on_b = SimpleNamespace(http=cluster.http(b, max_on_a.token),
                               agent=cluster.http(b, max_on_a.agent_token))
    on_a = await Client.open(cluster.ws_url(a), max_on_a.token)
    on_b = await Client.open(cluster.ws_url(b), max_on_a.token)
    await on_a.subscribe(None)
    await on_b.subscribe(None)
    # a card posted and answered through replica B reaches the client on replica A
    tid = await new_thread(max_on_b.http, title="via b")
    call_id, _ = await post_card(max_on_b.agent, tid, CHOICE)
    answered = await max_on_b.http.post(f"/v1/components/{call_id}:q1/answer",
                                        json={"selected": ["keep"]})
    assert answered.status_code == 200, answered.text
    await on_a.converge(await rest_state(max_on_a.http))
    answer = [r for r in on_a.state.values()
              if (r.get("source_meta") or {}).get("componentAnswer", {}).get("via") == "card"]
    assert len(answer) == 1
    # and the other way round
    await max_on_a.http.post(f"/v1/threads/{tid}/messages", json={"body": "via a"})
    await on_b.converge(await rest_state(max_on_b.http))
    await on_a.converge(await rest_state(max_on_a.http))
    await on_a.close()
    await on_b.close()


async def listener_pid(conn: asyncpg.Connection) -> int | None:
    pid: int | None = await conn.fetchval(
        "SELECT pid FROM pg_stat_activity WHERE application_name = $1"
        " AND datname = current_database()", store.LISTENER_APP_NAME)
    return pid


async def test_killing_the_listener_mid_load_misses_nothing(cluster: Cluster,
                                                             log_text: Any) -> None:
    # the tick is 30 s away: within this test only hints and the post-reconnect catch-up count
    server = cluster.start(realtime_poll_s="30")
    max_ = await cluster.user("max", server)
    threads = [await new_thread(max_.http) for _ in range(3)]
    client = await Client.open(cluster.ws_url(server), max_.token, max_queue=None)
    await client.subscribe(None)
    admin = await connect(cluster.database_url)
    stop = asyncio.Event()
    posted = 0
    target: int | None = None
    reached = asyncio.Event()

    async def writer(seed: int) -> None:
        nonlocal posted
        rng = random.Random(seed)
        while not stop.is_set():
            resp = await max_.http.post(f"/v1/threads/{rng.choice(threads)}/messages",
                                        json={"body": f"load {rng.random()}"})
            assert resp.status_code == 201, resp.text
            posted += 1
            if target is not None and posted >= target:
                reached.set()

    writers = [asyncio.create_task(writer(i)) for i in range(4)]
    try:
        await client.until(lambda: len(client.state) > 20)
        first = await listener_pid(admin)
        assert first is not None
        assert await admin.fetchval("SELECT pg_terminate_backend($1)", first)
        deadline = time.monotonic() + 20
        while (await listener_pid(admin)) in (None, first):  # a process outside: poll it
            assert time.monotonic() < deadline, "the listener never came back"
            await asyncio.sleep(0.05)
        target = posted + 40  # keep writing after the reconnect
        await asyncio.wait_for(reached.wait(), 30)
    finally:
        stop.set()
        await asyncio.gather(*writers)
    try:
        truth = await admin.fetch("SELECT id, rev FROM messages WHERE user_id = $1::uuid",
                                  max_.user_id)
        assert posted > 60
        expected = {("messages", r["id"]): r["rev"] for r in truth}
        await client.until(lambda: all(
            client.state.get(k, {}).get("rev", 0) >= rev for k, rev in expected.items()),
            wait_s=20)
        await client.converge(await rest_state(max_.http))
    finally:
        await admin.close()
    await client.close()
    assert "realtime listener reconnected" in log_text()


async def test_a_secret_body_is_null_in_frames_and_absent_from_logs(cluster: Cluster,
                                                                    log_text: Any) -> None:
    secret = "sk-live-e2e-4c1d9a"
    server = cluster.start()
    max_ = await cluster.user("max", server)
    eve = await cluster.user("eve", server)
    tid = await new_thread(max_.http)
    client = await Client.open(cluster.ws_url(server), max_.token, in_query=True)
    eve_client = await Client.open(cluster.ws_url(server), eve.token)
    await client.subscribe(None)
    await eve_client.subscribe(None)
    conn = await connect(cluster.database_url)
    try:
        message_id = await conn.fetchval(
            "INSERT INTO messages (user_id, thread_id, role, body, sensitive)"
            " VALUES ($1::uuid, $2::uuid, 'user', $3, true) RETURNING id",
            max_.user_id, tid, secret)
    finally:
        await conn.close()
    await client.until(lambda: ("messages", message_id) in client.state)
    assert client.state[("messages", message_id)]["body"] is None
    await eve_client.converge(await rest_state(eve.http))  # eve sees only her own records
    await client.close()
    await eve_client.close()
    assert secret not in str(client.frames)
    assert secret not in log_text()
    assert max_.token not in log_text()  # tokens in query strings are masked
