"""Local tools stay inside the workspace; commands run there; background commands return at
once and report their exit (real subprocesses, so these live with the integration tests)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from maxclaw.client.runtime.workspace_tools import BackgroundJob, LocalTools


async def test_read_and_write_inside_the_workspace(tmp_path: Path) -> None:
    tools = LocalTools(tmp_path / "ws")
    wrote = await tools.call("write_file", {"path": "a/b.txt", "content": "hé"}, "t")
    assert wrote == {"path": "a/b.txt", "written": 3}
    read = await tools.call("read_file", {"path": "a/b.txt"}, "t")
    assert read == {"path": "a/b.txt", "content": "hé", "truncated": False}


@pytest.mark.parametrize("path", ["../outside.txt", "/etc/passwd", "a/../../x", "", 7])
async def test_paths_outside_the_workspace_are_refused(tmp_path: Path, path: object) -> None:
    tools = LocalTools(tmp_path / "ws")
    for name, args in (("read_file", {"path": path}),
                       ("write_file", {"path": path, "content": "x"})):
        result = await tools.call(name, args, "t")
        assert "error" in result
    assert not (tmp_path / "outside.txt").exists()


async def test_a_symlink_out_of_the_workspace_is_refused(tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("no")
    tools = LocalTools(tmp_path / "ws")
    os.symlink(tmp_path / "secret.txt", tmp_path / "ws" / "link.txt")
    assert "outside the workspace" in (await tools.call("read_file", {"path": "link.txt"},
                                                        "t"))["error"]


async def test_unknown_tool_and_bad_arguments_are_errors_for_the_model(tmp_path: Path) -> None:
    tools = LocalTools(tmp_path)
    assert "error" in await tools.call("rm_rf", {}, "t")
    assert "error" in await tools.call("write_file", {"path": "x", "content": 3}, "t")
    assert "error" in await tools.call("run_command", {"command": " "}, "t")


async def test_foreground_command_runs_in_the_workspace(tmp_path: Path) -> None:
    tools = LocalTools(tmp_path)
    result = await tools.call("run_command", {"command": "pwd; exit 3"}, "t")
    assert result == {"exit_code": 3, "output": f"{tools.workspace}\n"}
    slow = await tools.call("run_command", {"command": "sleep 30", "timeout_s": 0.2}, "t")
    assert slow["exit_code"] is None
    assert "timed out" in slow["error"]


async def test_background_command_returns_at_once_and_reports_its_exit(tmp_path: Path) -> None:
    exited: asyncio.Queue[BackgroundJob] = asyncio.Queue()

    async def on_exit(job: BackgroundJob) -> None:
        await exited.put(job)

    tools = LocalTools(tmp_path, on_exit)
    gate = tmp_path / "gate"
    command = f"seq 1 40; while [ ! -e {gate} ]; do sleep 0.02; done; echo bye; exit 4"
    started = await tools.call("run_command", {"command": command, "run_in_background": True},
                               "thread-1")
    assert started == {"job_id": "job_1", "status": "running"}
    assert exited.empty()  # it is still running: the call did not wait for it
    gate.touch()
    job = await asyncio.wait_for(exited.get(), 10)
    assert (job.job_id, job.thread_id, job.exit_code) == ("job_1", "thread-1", 4)
    lines = job.tail().splitlines()
    assert len(lines) == 25
    assert lines[-2:] == ["40", "bye"]
    await tools.aclose()


async def test_a_background_job_is_told_started_first_and_ended_when_the_runtime_stops(
        tmp_path: Path) -> None:
    told: list[tuple[str, str, int | None, bool]] = []

    async def on_start(job: BackgroundJob) -> None:
        told.append(("started", job.job_id, job.exit_code, job.stopped))

    async def on_exit(job: BackgroundJob) -> None:
        told.append(("ended", job.job_id, job.exit_code, job.stopped))

    tools = LocalTools(tmp_path, on_exit, on_start)
    quick = await tools.call("run_command", {"command": "exit 3", "run_in_background": True},
                             "thread-1")
    assert told[0] == ("started", "job_1", None, False)  # before the exit was watched for
    while len(told) < 2:  # noqa: ASYNC110 (the watcher reports on its own task)
        await asyncio.sleep(0.01)
    assert told[1] == ("ended", "job_1", 3, False)
    stuck = await tools.call("run_command", {"command": "sleep 60", "run_in_background": True},
                             "thread-1")
    assert (quick["job_id"], stuck["job_id"]) == ("job_1", "job_2")
    await tools.aclose()
    # a job still running when the runtime stops is killed and told ended, once
    assert told[2:] == [("started", "job_2", None, False), ("ended", "job_2", None, True)]
    assert tools.jobs["job_2"].tail().endswith("the runtime shut down before the command "
                                               "ended]\n")
    await tools.aclose()
    assert len(told) == 4
