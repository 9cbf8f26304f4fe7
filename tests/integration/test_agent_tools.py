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
