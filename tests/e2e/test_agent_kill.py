"""An agent runtime dies (SIGKILL) or freezes (SIGSTOP) mid-turn, against the real
``maxclaw serve``: its lease lapses, another runtime claims the work and completes it, the
stale turn's writes are refused with 409 ``conflict``, and no ``ask_user_question`` runs twice.

The script's one working step carries two calls: a foreground ``sleep`` (where runtime A is
caught) and then the question, which A therefore never executes. Runtime B finds both calls
without results: it reports the command as interrupted and executes the question — once.
"""

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

from maxclaw.client.runtime.loop import INTERRUPTED
from maxclaw.db.database import connect
from tests.conftest import ServerProcess, start_server, user_with_tokens

LEASE_S = 2  # short, so a dead runtime's lease lapses quickly
WAIT_S = 60.0
ASK = {"title": "Deploy window", "questions": [
    {"id": "when", "kind": "choice", "question": "Deploy tonight or tomorrow?",
     "options": [{"id": "tonight", "label": "Tonight"}, {"id": "tomorrow", "label": "Tomorrow"}]}]}
RESUMED = "Picked up after the other runtime stopped; the question is open."


def script(sleep_s: int) -> dict[str, Any]:
    return {"replies": [
        {"id": "work", "tool_calls": [
            {"name": "run_command", "arguments": {"command": f"sleep {sleep_s}"}},
            {"name": "ask_user_question", "arguments": ASK}]},
        {"id": "resumed", "content": RESUMED},
    ]}


@pytest.fixture
def serve(database_url: str, tmp_path: Path) -> Iterator[ServerProcess]:
    srv = start_server(database_url, tmp_path / "serve.log",
                       env={"MAXCLAW_TURN_LEASE_S": str(LEASE_S)})
    yield srv
    srv.stop()


class World:
    def __init__(self, srv: ServerProcess, tmp: Path, conn: asyncpg.Connection,
                 user: httpx.AsyncClient, agent: httpx.AsyncClient, agent_token: str,
                 thread_id: str) -> None:
        self.srv, self.tmp, self.conn = srv, tmp, conn
        self.user, self.agent, self.agent_token, self.thread_id = user, agent, agent_token, \
            thread_id
        self.procs: list[subprocess.Popen[bytes]] = []

    def start_agent(self, name: str, sleep_s: int) -> tuple[subprocess.Popen[bytes], Path]:
        path = self.tmp / f"script-{name}.json"
        path.write_text(json.dumps(script(sleep_s)))
        log = self.tmp / f"agent-{name}.log"
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "maxclaw.cli", "agent", "--base-url", self.srv.base_url,
                 "--token", self.agent_token, "--model", f"scripted:{path}",
                 "--workspace", str(self.tmp / f"ws-{name}"), "--runtime-id", name,
                 "--wait-s", "5"],
                env={**os.environ, "MAXCLAW_LOG_JSON": "true"}, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(proc)
        return proc, log

    async def rows(self, sql: str, *args: Any) -> list[Any]:
        return list(await self.conn.fetch(sql, *args))

    async def until(self, what: str, check: Callable[[], Any]) -> Any:
        """Poll the database (another process's state: there is no event to await)."""
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            value = await check()
            if value:
                return value
            await asyncio.sleep(0.05)
        logs = "\n".join(p.read_text()[-2000:] for p in self.tmp.glob("*.log"))
        raise AssertionError(f"timed out waiting for {what}\n{logs}")

    async def turns(self) -> list[Any]:
        return await self.rows("SELECT id, status, runtime_id FROM turns "
                               "WHERE thread_id = $1::uuid ORDER BY id", self.thread_id)

    async def work_row(self) -> Any:
        rows = await self.rows("SELECT id, tool_calls, turn_id FROM messages WHERE thread_id "
                               "= $1::uuid AND role = 'assistant' ORDER BY id", self.thread_id)
        return rows[0] if rows else None


@pytest.fixture
async def world(serve: ServerProcess, tmp_path: Path) -> AsyncIterator[World]:
    user_token, agent_token = await user_with_tokens(serve.database_url)
    conn = await connect(serve.database_url)
    user = httpx.AsyncClient(base_url=serve.base_url,
                             headers={"Authorization": f"Bearer {user_token}"})
    agent = httpx.AsyncClient(base_url=serve.base_url,
                              headers={"Authorization": f"Bearer {agent_token}"})
    thread_id = (await user.post("/v1/threads", json={"title": "Release"})).json()["id"]
    w = World(serve, tmp_path, conn, user, agent, agent_token, thread_id)
    try:
        yield w
    finally:
        for proc in w.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        await user.aclose()
        await agent.aclose()
        await conn.close()


async def caught_mid_turn(w: World) -> Any:
    """Until A has posted its working step (and so sits in the foreground sleep)."""
    return await w.until("A's working step", w.work_row)


async def assert_completed_once_by_b(w: World, stale_turn: int) -> None:
    turns = await w.until("B to finish the re-queued turn",
                          lambda: _done_by(w, "B"))
    assert [(t["status"], t["runtime_id"]) for t in turns] == [("lapsed", "A"), ("done", "B")]
    assert turns[0]["id"] == stale_turn
    work = await w.work_row()
    sleep_call, ask_call = (c["id"] for c in work["tool_calls"])
    results = {r["tool_call_id"]: r for r in await w.rows(
        "SELECT tool_call_id, content, turn_id FROM messages WHERE thread_id = $1::uuid "
        "AND role = 'tool'", w.thread_id)}
    assert results[sleep_call]["content"] == INTERRUPTED
    assert results[ask_call]["content"]["posted"] is True
    assert results[ask_call]["turn_id"] == work["turn_id"] == stale_turn
    components = await w.rows("SELECT id FROM message_components WHERE thread_id = $1::uuid",
                              w.thread_id)
    assert [c["id"] for c in components] == [f"{ask_call}:when"]  # asked exactly once
    # executing it again replays the first result and creates nothing
    again = await w.agent.post(
        f"/v1/agent/threads/{w.thread_id}/tool-calls/{ask_call}/execute")
    assert again.status_code == 200
    assert again.json()["content"] == results[ask_call]["content"]
    assert len(await w.rows("SELECT id FROM message_components WHERE thread_id = $1::uuid",
                            w.thread_id)) == 1
    last = await w.rows("SELECT body FROM messages WHERE thread_id = $1::uuid AND "
                        "role = 'assistant' ORDER BY id DESC LIMIT 1", w.thread_id)
    assert last[0]["body"] == RESUMED


async def _done_by(w: World, runtime: str) -> list[Any] | None:
    turns = await w.turns()
    done = [t for t in turns if t["status"] == "done" and t["runtime_id"] == runtime]
    return turns if done else None


async def assert_stale_writes_refused(w: World, stale_turn: int) -> None:
    for path in ("heartbeat", "inbox", "finish"):
        resp = await w.agent.post(f"/v1/agent/turns/{stale_turn}/{path}")
        assert resp.status_code == 409, resp.text
        assert resp.json()["code"] == "conflict"
    resp = await w.agent.post(f"/v1/agent/threads/{w.thread_id}/messages", json={
        "role": "assistant", "content": "I am back", "turn_id": stale_turn})
    assert resp.status_code == 409, resp.text
    assert resp.json()["code"] == "conflict"


async def test_killed_runtime_is_replaced_and_fenced(world: World) -> None:
    w = world
    runtime_a, _ = w.start_agent("A", sleep_s=600)
    assert (await w.user.post(f"/v1/threads/{w.thread_id}/messages",
                              json={"body": "Ship the release."})).status_code == 201
    work = await caught_mid_turn(w)
    os.killpg(runtime_a.pid, signal.SIGKILL)  # the runtime and its sleep, mid-turn
    runtime_a.wait()
    w.start_agent("B", sleep_s=600)
    await assert_completed_once_by_b(w, work["turn_id"])
    await assert_stale_writes_refused(w, work["turn_id"])


async def test_frozen_runtime_wakes_up_to_find_its_writes_refused(world: World) -> None:
    w = world
    runtime_a, log_a = w.start_agent("A", sleep_s=2)
    assert (await w.user.post(f"/v1/threads/{w.thread_id}/messages",
                              json={"body": "Ship the release."})).status_code == 201
    work = await caught_mid_turn(w)
    runtime_a.send_signal(signal.SIGSTOP)  # frozen (its sleep child runs on and exits)
    try:
        w.start_agent("B", sleep_s=2)
        await assert_completed_once_by_b(w, work["turn_id"])
    finally:
        runtime_a.send_signal(signal.SIGCONT)

    async def lost() -> bool:
        return "turn lost (lease lapsed)" in log_a.read_text()

    await w.until("A to notice that its turn is gone", lost)
    # A wrote nothing after it froze: its turn holds its working step and the question's
    # result, which B executed (the execute endpoint stamps the call's turn on its row)
    rows = await w.rows("SELECT role, tool_call_id FROM messages WHERE turn_id = $1 "
                        "ORDER BY id", work["turn_id"])
    ask_call = work["tool_calls"][1]["id"]
    assert [(r["role"], r["tool_call_id"]) for r in rows] == [("assistant", None),
                                                              ("tool", ask_call)]
    serve_log = w.srv.log_path.read_text()
    refused = [json.loads(line) for line in serve_log.splitlines()
               if line.startswith("{") and '"status": 409' in line]
    assert refused, "A's stale heartbeat or write was refused with 409"
    assert await _done_by(w, "B")
    assert runtime_a.poll() is None  # A survived and is claiming again
