"""A runtime running a background job dies (SIGKILL), against the real ``maxclaw serve`` and
the reference runtime process (``maxclaw agent``): its runtime lease is no longer heartbeated,
the lapse tick ends the job as lost (one ``jobLost`` event, one queued turn), and the thread's
derived state stops saying "working in the background". Short leases via the environment."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from maxclaw.db.database import connect
from tests.conftest import ServerProcess, start_server, user_with_tokens

LEASE_S = 2  # the runtime lease: a dead runtime's jobs end soon after
TICK_S = 0.5  # the lapse tick
WAIT_S = 60.0
SCRIPT = {"replies": [
    {"id": "start", "tool_calls": [{"name": "run_command", "arguments": {
        "command": "sleep 600", "run_in_background": True}}]},
    {"id": "wait", "content": "The long job runs in the background; I will wait for it."},
]}


@pytest.fixture
def serve(database_url: str, tmp_path: Path) -> Iterator[ServerProcess]:
    srv = start_server(database_url, tmp_path / "serve.log",
                       env={"MAXCLAW_RUNTIME_LEASE_S": str(LEASE_S),
                            "MAXCLAW_LAPSE_INTERVAL_S": str(TICK_S)})
    yield srv
    srv.stop()


class World:
    def __init__(self, srv: ServerProcess, tmp: Path, conn: asyncpg.Connection,
                 user: httpx.AsyncClient, agent_token: str, thread_id: str) -> None:
        self.srv, self.tmp, self.conn = srv, tmp, conn
        self.user, self.agent_token, self.thread_id = user, agent_token, thread_id
        self.procs: list[subprocess.Popen[bytes]] = []

    def start_agent(self, name: str) -> subprocess.Popen[bytes]:
        path = self.tmp / f"script-{name}.json"
        path.write_text(json.dumps(SCRIPT))
        with (self.tmp / f"agent-{name}.log").open("ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "maxclaw.cli", "agent", "--base-url", self.srv.base_url,
                 "--token", self.agent_token, "--model", f"scripted:{path}",
                 "--workspace", str(self.tmp / f"ws-{name}"), "--runtime-id", name,
                 "--wait-s", "5"],
                env={**os.environ, "MAXCLAW_LOG_JSON": "true"}, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(proc)
        return proc

    async def until(self, what: str, check: Callable[[], Any]) -> Any:
        """Poll (another process's state: there is no event to await)."""
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            value = await check()
            if value:
                return value
            await asyncio.sleep(0.05)
        logs = "\n".join(p.read_text()[-3000:] for p in self.tmp.glob("*.log"))
        raise AssertionError(f"timed out waiting for {what}\n{logs}")

    async def thread(self) -> dict[str, Any]:
        resp = await self.user.get(f"/v1/threads/{self.thread_id}")
        assert resp.status_code == 200, resp.text
        return dict(resp.json())

    async def events(self, key: str) -> list[Any]:
        return [r["source_meta"][key] for r in await self.conn.fetch(
            "SELECT source_meta FROM messages WHERE thread_id = $1::uuid AND role = 'event'"
            " AND source_meta ? $2 ORDER BY id", self.thread_id, key)]


@pytest.fixture
async def world(serve: ServerProcess, tmp_path: Path) -> AsyncIterator[World]:
    user_token, agent_token = await user_with_tokens(serve.database_url)
    conn = await connect(serve.database_url)
    user = httpx.AsyncClient(base_url=serve.base_url,
                             headers={"Authorization": f"Bearer {user_token}"})
    thread_id = (await user.post("/v1/threads", json={"title": "Long job"})).json()["id"]
    w = World(serve, tmp_path, conn, user, agent_token, thread_id)
    try:
        yield w
    finally:
        for proc in w.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        await user.aclose()
        await conn.close()


async def test_a_killed_runtimes_background_job_ends_as_lost(world: World) -> None:
    w = world
    runtime = w.start_agent("A")
    assert (await w.user.post(f"/v1/threads/{w.thread_id}/messages",
                              json={"body": "Run the long job."})).status_code == 201

    async def working() -> dict[str, Any] | None:
        got = await w.thread()
        return got if got["state"] == "working in the background" else None

    got = await w.until("the runtime's turn to end with its job running", working)
    assert got["background_jobs"] == 1
    [start] = [j for j in await w.events("backgroundJob") if j["phase"] == "started"]
    lease_id = start["lease_id"]
    # the runtime heartbeats its lease: it outlives several lease periods while A lives
    lease = await w.conn.fetchrow("SELECT status, lease_until FROM runtime_leases "
                                  "WHERE id = $1::uuid", lease_id)
    assert lease["status"] == "active"
    await w.until("a heartbeat to move the lease on", lambda: moved_on(w, lease_id,
                                                                       lease["lease_until"]))
    assert (await w.thread())["state"] == "working in the background"

    os.killpg(runtime.pid, signal.SIGKILL)  # the runtime and its job, with no last word
    runtime.wait()
    killed = time.monotonic()

    lost = await w.until("the job to end as lost", lambda: w.events("jobLost"))
    ended_after_s = time.monotonic() - killed
    assert lost == [{"job_id": start["job_id"], "lease_id": lease_id, "runtime": "A"}]
    got = await w.thread()
    assert (got["state"], got["background_jobs"], got["turn_state"]) == ("running", 0, "queued")
    assert (await w.conn.fetchval("SELECT status FROM runtime_leases WHERE id = $1::uuid",
                                  lease_id)) == "lapsed"
    turns = [r["status"] for r in await w.conn.fetch(
        "SELECT status FROM turns WHERE thread_id = $1::uuid ORDER BY id", w.thread_id)]
    assert turns == ["done", "queued"]  # the agent is woken once, for its next runtime
    # more ticks change nothing: the job was lost once
    await asyncio.sleep(3 * TICK_S)
    assert len(await w.events("jobLost")) == 1
    print(f"job ended as lost {ended_after_s:.2f} s after the kill "
          f"(lease {LEASE_S} s, tick {TICK_S} s)")


async def moved_on(w: World, lease_id: str, first: Any) -> bool:
    until = await w.conn.fetchval("SELECT lease_until FROM runtime_leases WHERE id = $1::uuid",
                                  lease_id)
    return bool(until > first)
