"""``maxclaw bridge`` end to end: a real ``maxclaw serve``, a real ``maxclaw bridge`` process
and a fake host (``bridge_fake_host.py``) that records its invocations and asks through
``/mcp`` with the official SDK. Max answers over HTTP; the bridge runs the host exactly once
with the answer as its prompt — also when the bridge is killed with ``kill -9`` while the host
runs and is started again. A failing, missing or hanging host is run once more and then left
for Max; a revoked token stops the bridge with exit status 1."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from maxclaw.client.bridge import FAILED_MARK, GAVE_UP_MARK
from tests.conftest import ServerProcess
from tests.integration.test_mcp import (
    Person,
    answer_on_card,
    new_thread,
    people,
    rest,
    serve,
    servers,
)

__all__ = ["servers"]  # the fixture, used by name
pytestmark = pytest.mark.timeout(300)
FAKE_HOST = str(Path(__file__).with_name("bridge_fake_host.py"))
LEASE_S = 3  # the servers' turn lease: a killed bridge's turn lapses within seconds


class BridgeRun:
    """A ``maxclaw bridge`` subprocess; its log is the test's evidence when a check fails."""

    def __init__(self, tmp_path: Path, url: str, token: str, thread: str,
                 host: list[str], *extra: str, env: dict[str, str] | None = None) -> None:
        self.log = tmp_path / f"bridge-{time.monotonic_ns()}.log"
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("MAXCLAW_")}
        full_env.update({"MAXCLAW_TOKEN": token, "MAXCLAW_LOG_JSON": "true", **(env or {})})
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "maxclaw.cli", "bridge", "--url", url, "--thread", thread,
                 "--wait-s", "1", "--state-dir", str(tmp_path / "state"), *extra, "--", *host],
                env=full_env, stdout=out, stderr=subprocess.STDOUT)

    def text(self) -> str:
        return self.log.read_text()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def bridges() -> Iterator[list[BridgeRun]]:
    started: list[BridgeRun] = []
    yield started
    for run in started:
        run.stop()


def host_command(records: Path, url: str, thread: str) -> list[str]:
    return [sys.executable, FAKE_HOST, str(records), url, thread, "{prompt}"]


def invocations(records: Path) -> list[dict[str, Any]]:
    if not records.exists():
        return []
    lines = [json.loads(line) for line in records.read_text().splitlines() if line]
    return [r for r in lines if "prompt" in r]


async def eventually(check: Any, what: str, within_s: float = 60,
                     log: BridgeRun | None = None) -> Any:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        await asyncio.sleep(0.1)
    tail = "\n".join(log.text().splitlines()[-30:]) if log is not None else ""
    said = f"; the bridge's log:\n{tail}" if tail else ""
    raise AssertionError(f"timed out waiting for {what}{said}")


def bridge_lines(run: BridgeRun) -> list[dict[str, Any]]:
    """The bridge's JSON log lines so far."""
    return [json.loads(line) for line in run.text().splitlines() if line.startswith("{")]


async def turn_state(srv: ServerProcess, who: Person, thread: str) -> str:
    async with rest(srv.base_url, who.user_token) as http:
        return str((await http.get(f"/v1/threads/{thread}")).json()["turn_state"])


# How long a thread must stay idle to count as settled. After a kill, a stop or a failing
# host, two leases: a turn whose lease lapsed would be queued again by then. After a run that
# finished, nothing lapses: what could run again (input left undelivered) is queued at the
# finish itself and claimed at the bridge's next poll (``--wait-s 1``), so two polls suffice.
AFTER_A_LAPSE_S = 2 * LEASE_S
AFTER_A_FINISH_S = 2.0


async def settled_idle(srv: ServerProcess, who: Person, thread: str,
                       hold_s: float = AFTER_A_LAPSE_S) -> None:
    """The thread idle now and still idle ``hold_s`` later (nothing queued or re-run)."""
    deadline = time.monotonic() + 60
    while await turn_state(srv, who, thread) != "idle":
        assert time.monotonic() < deadline, "the thread never went idle"
        await asyncio.sleep(0.2)
    await asyncio.sleep(hold_s)
    assert await turn_state(srv, who, thread) == "idle"


async def messages(srv: ServerProcess, who: Person, thread: str) -> list[dict[str, Any]]:
    async with rest(srv.base_url, who.user_token) as http:
        resp = await http.get(f"/v1/threads/{thread}/messages", params={"limit": 500})
    return list(resp.json()["messages"])


async def post_as_max(srv: ServerProcess, who: Person, thread: str, body: str) -> None:
    async with rest(srv.base_url, who.user_token) as http:
        resp = await http.post(f"/v1/threads/{thread}/messages", json={"body": body})
    assert resp.status_code == 201, resp.text


async def test_the_host_runs_once_with_the_answer_across_a_kill_9(
        database_url: str, tmp_path: Path, servers: list[ServerProcess],
        bridges: list[BridgeRun], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAXCLAW_TURN_LEASE_S", str(LEASE_S))
    srv = serve(servers, database_url, tmp_path)
    [max_] = await people(database_url, "max")
    thread = await new_thread(srv.base_url, max_)
    other = await new_thread(srv.base_url, max_, "Not the bridge's")
    records, hold = tmp_path / "records.jsonl", tmp_path / "hold"
    host = host_command(records, srv.base_url, thread)

    # the person starts the host by hand; it asks Max over MCP and its turn ends
    env = {**os.environ, "MAXCLAW_TOKEN": max_.agent_token}
    first = await asyncio.to_thread(subprocess.run, [*host[:-1], "start"], env=env,
                                    timeout=120, capture_output=True)
    assert first.returncode == 0, first.stderr.decode()
    asked = [json.loads(line) for line in records.read_text().splitlines() if "asked" in line]
    component = asked[0]["asked"]

    hold.touch()  # the bridge's host run keeps running until the test removes this file
    bridges.append(BridgeRun(tmp_path, srv.base_url, max_.agent_token, thread, host,
                             env={"FAKE_HOST_HOLD": str(hold)}))
    await post_as_max(srv, max_, other, "for another runtime")  # an unbound token: not ours
    await answer_on_card(srv.base_url, max_, component, "yes")
    runs = await eventually(lambda: invocations(records)[1:], "the bridge to run the host")
    assert "Ship it" in runs[0]["prompt"], runs[0]
    assert "for another runtime" not in runs[0]["prompt"]

    # kill -9 the bridge while the host runs (after its journal holds the host's pid: a kill
    # between the host's start and that write is the window where the input runs again); the
    # lease lapses, the turn is queued again
    await eventually(lambda: '"host started"' in bridges[0].text(),
                     "the bridge to journal the host's pid", log=bridges[0])
    bridges[0].proc.kill()
    bridges[0].proc.wait()
    await asyncio.sleep(LEASE_S + 1)
    bridges.append(BridgeRun(tmp_path, srv.base_url, max_.agent_token, thread, host,
                             env={"FAKE_HOST_HOLD": str(hold)}))
    await eventually(lambda: "still running this input" in bridges[1].text(),
                     "the restarted bridge to adopt the running host", within_s=120,
                     log=bridges[1])
    assert await turn_state(srv, max_, thread) == "running"
    hold.unlink()
    await settled_idle(srv, max_, thread)
    assert len(invocations(records)) == 2, invocations(records)  # by hand, then once
    assert await turn_state(srv, max_, other) == "queued"  # never claimed by the bridge

    # the restarted bridge still serves: Max's next message runs the host once more, and the
    # host asks again over MCP during the bridge's turn
    await post_as_max(srv, max_, thread, "Now tag the release [ask]")
    runs = await eventually(lambda: invocations(records)[2:], "the next run")
    assert runs[0]["prompt"] == "Now tag the release [ask]", runs
    await settled_idle(srv, max_, thread, AFTER_A_FINISH_S)
    assert len(invocations(records)) == 3
    asked = [json.loads(line) for line in records.read_text().splitlines() if "asked" in line]
    assert len(asked) == 2
    await answer_on_card(srv.base_url, max_, asked[1]["asked"], "no")
    runs = await eventually(lambda: invocations(records)[3:], "the run with the second answer")
    assert "Wait a week" in runs[0]["prompt"] and "Ship it" not in runs[0]["prompt"], runs
    await settled_idle(srv, max_, thread, AFTER_A_FINISH_S)
    assert len(invocations(records)) == 4


@pytest.mark.parametrize("failure", ["exit", "missing", "hang"])
async def test_a_failing_host_runs_once_more_then_is_left_for_max(
        failure: str, database_url: str, tmp_path: Path, servers: list[ServerProcess],
        bridges: list[BridgeRun], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAXCLAW_TURN_LEASE_S", str(LEASE_S))
    srv = serve(servers, database_url, tmp_path)
    [max_] = await people(database_url, "max")
    thread = await new_thread(srv.base_url, max_)
    records = tmp_path / "records.jsonl"
    host = host_command(records, srv.base_url, thread)
    extra: tuple[str, ...] = ()
    env = {"FAKE_HOST_EXIT": "3"}
    if failure == "missing":
        host = [str(tmp_path / "no-such-host"), "{prompt}"]
    if failure == "hang":
        env = {"FAKE_HOST_SLEEP": "600"}
        extra = ("--timeout-s", "1")
    bridges.append(BridgeRun(tmp_path, srv.base_url, max_.agent_token, thread, host, *extra,
                             env=env))
    await post_as_max(srv, max_, thread, "Fix the flaky test")
    await eventually(lambda: "left for Max" in bridges[0].text(), "the bridge to give up")
    # the bridge finished the turn it gave up on (no lease is left to lapse): only a requeue
    # at that finish could run it again, claimed at the next poll, so the shorter hold proves it
    ends = await eventually(lambda: [line for line in bridge_lines(bridges[0])
                                     if line["msg"] == "turn finished"][1:],
                            "the bridge to finish the turn it gave up on", log=bridges[0])
    assert ends[0]["requeued"] is False, ends
    assert "could not finish the turn" not in bridges[0].text()
    await settled_idle(srv, max_, thread, AFTER_A_FINISH_S)

    if failure != "missing":
        runs = invocations(records)
        assert [r["prompt"] for r in runs] == ["Fix the flaky test"] * 2, runs
    rows = await messages(srv, max_, thread)
    assert [r["role"] for r in rows] == ["user", "event", "assistant"], rows
    assert FAILED_MARK in rows[1]["body"]
    assert GAVE_UP_MARK in rows[2]["body"]
    lines = bridge_lines(bridges[0])
    kind = {"exit": "failed", "missing": "cannot be started", "hang": "timeout"}[failure]
    assert any(kind in line["msg"] for line in lines), lines
    assert bridges[0].proc.poll() is None  # a failing host does not stop the bridge


async def test_a_revoked_token_stops_the_bridge_with_exit_1(
        database_url: str, tmp_path: Path, servers: list[ServerProcess],
        bridges: list[BridgeRun]) -> None:
    srv = serve(servers, database_url, tmp_path)
    [max_] = await people(database_url, "max")
    thread = await new_thread(srv.base_url, max_)
    run = BridgeRun(tmp_path, srv.base_url, max_.agent_token, thread,
                    host_command(tmp_path / "records.jsonl", srv.base_url, thread))
    bridges.append(run)
    await eventually(lambda: "bridge started" in run.text(), "the bridge to start")
    async with rest(srv.base_url, max_.user_token) as http:
        tokens = (await http.get("/v1/tokens")).json()["tokens"]
        [agent] = [t for t in tokens if t["role"] == "agent"]
        assert (await http.delete(f"/v1/tokens/{agent['id']}")).status_code == 204
    code = await asyncio.to_thread(run.proc.wait, 60)
    assert code == 1
    assert "refused the agent token" in run.text()

    # a thread the token cannot serve, or a token refused at start: exit 1 at once, one line
    [other] = await people(database_url, "other")
    for token, where, says in ((other.agent_token, thread, "knows no thread"),
                               (max_.agent_token, thread, "refused the bridge")):
        again = BridgeRun(tmp_path, srv.base_url, token, where,
                          host_command(tmp_path / "records.jsonl", srv.base_url, where))
        bridges.append(again)
        assert await asyncio.to_thread(again.proc.wait, 60) == 1
        assert says in again.text(), again.text()
    assert not (tmp_path / "records.jsonl").exists()


def test_config_file_and_placeholders(tmp_path: Path) -> None:
    from maxclaw.client.bridge import BridgeStop, Target, command_for, load_config

    config = tmp_path / "bridge.toml"
    config.write_text('[[thread]]\nid = "t1"\ncommand = ["claude", "-p", "--resume", '
                      '"{session}", "{prompt}"]\nsession = "s1"\n\n'
                      '[[thread]]\nid = "t2"\ncommand = ["codex", "exec", "resume", "{session}",'
                      ' "--", "{prompt}"]\nsession = "s2"\ntimeout_s = 60\n')
    first, second = load_config(config)
    assert first == Target("t1", ("claude", "-p", "--resume", "{session}", "{prompt}"), "s1")
    assert second.timeout_s == 60
    prompt = 'Answer: {"ok": true} {session}'  # braces in the prompt stay as they are
    assert command_for(second, prompt, 7) == ["codex", "exec", "resume", "s2", "--", prompt]
    for bad in ('[[thread]]\nid = "t"\n', "thread = 3\n", "", "[[thread]\n"):
        config.write_text(bad)
        with pytest.raises(BridgeStop):
            load_config(config)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purpose (its parent, the bridge, has not reaped it yet)
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


async def test_max_stops_the_turn_and_the_bridge_stops_the_host(
        database_url: str, tmp_path: Path, servers: list[ServerProcess],
        bridges: list[BridgeRun], monkeypatch: pytest.MonkeyPatch) -> None:
    """Stop while the host runs: the host's process ends within a heartbeat, the turn is
    ``stopped`` (not failed, not requeued), the stopped input is never run again, and Max's
    next message starts a new turn that runs the host with that message only."""
    monkeypatch.setenv("MAXCLAW_TURN_LEASE_S", str(LEASE_S))
    srv = serve(servers, database_url, tmp_path)
    [max_] = await people(database_url, "max")
    thread = await new_thread(srv.base_url, max_)
    records = tmp_path / "records.jsonl"
    hold = tmp_path / "hold"
    hold.touch()  # the host runs until the file is gone (or it is stopped)
    bridges.append(BridgeRun(tmp_path, srv.base_url, max_.agent_token, thread,
                             host_command(records, srv.base_url, thread),
                             env={"FAKE_HOST_HOLD": str(hold)}))
    await post_as_max(srv, max_, thread, "Rewrite the parser")
    [run] = await eventually(lambda: invocations(records), "the host to start")
    assert run["prompt"] == "Rewrite the parser"
    assert await turn_state(srv, max_, thread) == "running"

    async with rest(srv.base_url, max_.user_token) as http:
        resp = await http.post(f"/v1/threads/{thread}/turn/stop")
    assert resp.status_code == 200, resp.text
    stopped_at = time.monotonic()
    await eventually(lambda: not alive(run["pid"]), "the host to be stopped", within_s=20)
    # within one heartbeat interval (lease / 3) plus the host's SIGTERM handling
    assert time.monotonic() - stopped_at < LEASE_S + 5
    await eventually(lambda: "Max stopped the turn; the host was stopped" in bridges[0].text(),
                     "the bridge to log the stop")
    await settled_idle(srv, max_, thread)
    assert len(invocations(records)) == 1  # not requeued, not retried
    assert [r["role"] for r in await messages(srv, max_, thread)] == ["user"]  # nothing written

    hold.unlink()
    await post_as_max(srv, max_, thread, "Only the tokenizer, then")
    runs = await eventually(lambda: invocations(records)[1:], "the next turn's host")
    assert [r["prompt"] for r in runs] == ["Only the tokenizer, then"]
    await settled_idle(srv, max_, thread, AFTER_A_FINISH_S)
    assert bridges[0].proc.poll() is None
