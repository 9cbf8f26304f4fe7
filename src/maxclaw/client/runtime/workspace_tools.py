"""The runtime's local tools, confined to one workspace directory.

``read_file`` and ``write_file`` refuse any path that resolves outside the workspace (``..``,
absolute paths, symlinks pointing out). ``run_command`` runs a shell command with the workspace
as its working directory; it is a convenience for a reference runtime, not a sandbox.

``run_command`` with ``run_in_background: true`` is seed 004's level 2: it starts the process
and returns ``{"job_id", "status": "running"}`` at once, so the step ends and the model keeps
working. ``on_start(job)`` is awaited once the process runs (the runtime posts an event that
wakes nothing, so the thread's state counts the job); when the process exits, ``on_exit(job)``
is called; the runtime posts it as an ``event`` row, which reaches the model through the same
inbox as user messages and answers, and wakes the thread if it is idle.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAX_READ = 200_000
TAIL_LINES = 25
TAIL_CHARS = 4_000
FOREGROUND_TIMEOUT_S = 300.0

SPECS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "read_file",
        "description": "Read a text file of the workspace (paths are relative to it).",
        "parameters": {"type": "object", "required": ["path"],
                       "properties": {"path": {"type": "string"}}}}},
    {"type": "function", "function": {
        "name": "write_file",
        "description": "Write (create or replace) a text file of the workspace.",
        "parameters": {"type": "object", "required": ["path", "content"],
                       "properties": {"path": {"type": "string"},
                                      "content": {"type": "string"}}}}},
    {"type": "function", "function": {
        "name": "run_command",
        "description": (
            "Run a shell command in the workspace. With run_in_background: true it returns at "
            "once with a job id; when the command exits, its exit code and last lines of "
            "output arrive later as a service event in this conversation. Until then, do not "
            "claim it passed, and do not wait with sleep: keep working or end the turn."),
        "parameters": {"type": "object", "required": ["command"],
                       "properties": {"command": {"type": "string"},
                                      "run_in_background": {"type": "boolean"},
                                      "timeout_s": {"type": "number"}}}}},
]
NAMES = frozenset(spec["function"]["name"] for spec in SPECS)


# A runtime shutting down reports its running jobs as ended, but never waits long to: the
# service may be gone too.
STOP_REPORT_S = 5.0
STOPPED_NOTE = "\n[stopped: the runtime shut down before the command ended]\n"


class ToolError(Exception):
    """A tool call the model got wrong; its message goes back to the model."""


@dataclass
class BackgroundJob:
    job_id: str
    command: str
    thread_id: str
    process: asyncio.subprocess.Process
    exit_code: int | None = None
    output: str = ""  # a rolling buffer of the end of the output
    stopped: bool = False  # killed when the runtime shut down, before it ended
    reported: bool = False  # its end was handed to ``on_exit``

    def tail(self) -> str:
        return _tail(self.output)


ExitHook = Callable[[BackgroundJob], Awaitable[None]]
StartHook = ExitHook


class LocalTools:
    """read_file, write_file, run_command — inside ``workspace`` only."""

    def __init__(self, workspace: Path, on_exit: ExitHook | None = None,
                 on_start: StartHook | None = None) -> None:
        self.workspace = workspace.resolve()
        self.workspace.mkdir(parents=True, exist_ok=True)
        self.on_exit = on_exit
        self.on_start = on_start
        self.jobs: dict[str, BackgroundJob] = {}
        self._ids = itertools.count(1)
        self._watchers: set[asyncio.Task[None]] = set()

    def path(self, relative: Any) -> Path:
        """``relative`` inside the workspace, or ``ToolError``."""
        if not isinstance(relative, str) or not relative.strip():
            raise ToolError("path must be a non-empty string relative to the workspace")
        target = (self.workspace / relative).resolve()
        if target != self.workspace and self.workspace not in target.parents:
            raise ToolError(f"{relative!r} is outside the workspace; use a relative path "
                            "inside it")
        return target

    async def call(self, name: str, args: dict[str, Any], thread_id: str) -> dict[str, Any]:
        """Run one tool; errors become ``{"error": …}`` for the model to read."""
        try:
            if name == "read_file":
                return self.read_file(args.get("path"))
            if name == "write_file":
                return self.write_file(args.get("path"), args.get("content"))
            if name == "run_command":
                return await self.run_command(args.get("command"), thread_id,
                                              bool(args.get("run_in_background")),
                                              args.get("timeout_s"))
            raise ToolError(f"no local tool named {name!r}")
        except ToolError as exc:
            return {"error": str(exc)}
        except OSError as exc:
            return {"error": f"{type(exc).__name__}: {exc.strerror or exc}"}

    def read_file(self, relative: Any) -> dict[str, Any]:
        target = self.path(relative)
        if not target.is_file():
            raise ToolError(f"{relative!r} is not a file in the workspace")
        text = target.read_text(encoding="utf-8", errors="replace")
        return {"path": relative, "content": text[:MAX_READ], "truncated": len(text) > MAX_READ}

    def write_file(self, relative: Any, content: Any) -> dict[str, Any]:
        if not isinstance(content, str):
            raise ToolError("content must be a string")
        target = self.path(relative)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
        return {"path": relative, "written": len(content.encode())}

    async def run_command(self, command: Any, thread_id: str, background: bool,
                          timeout_s: Any = None) -> dict[str, Any]:
        if not isinstance(command, str) or not command.strip():
            raise ToolError("command must be a non-empty string")
        process = await asyncio.create_subprocess_shell(
            command, cwd=self.workspace, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            start_new_session=True)  # its own process group, so a timeout kills it whole
        if background:
            job = BackgroundJob(f"job_{next(self._ids)}", command, thread_id, process)
            self.jobs[job.job_id] = job
            if self.on_start is not None:
                # reported before the exit is watched for, so its start is always told first
                await self.on_start(job)
            task = asyncio.create_task(self._watch(job), name=f"job {job.job_id}")
            self._watchers.add(task)
            task.add_done_callback(self._watchers.discard)
            return {"job_id": job.job_id, "status": "running"}
        limit = float(timeout_s) if isinstance(timeout_s, int | float) else FOREGROUND_TIMEOUT_S
        try:
            output, _ = await asyncio.wait_for(process.communicate(), limit)
        except TimeoutError:
            _kill_group(process)
            await process.wait()
            return {"exit_code": None, "error": f"timed out after {limit:g} s (killed)"}
        return {"exit_code": process.returncode, "output": _tail(output.decode(errors="replace"))}

    async def _watch(self, job: BackgroundJob) -> None:
        assert job.process.stdout is not None
        while chunk := await job.process.stdout.read(65536):
            job.output = (job.output + chunk.decode(errors="replace"))[-4 * TAIL_CHARS:]
        job.exit_code = await job.process.wait()
        if self.on_exit is not None:
            await self.on_exit(job)
        job.reported = True

    async def aclose(self) -> None:
        """Stop background jobs and their watchers. A job whose end was not reported yet is
        reported now, within ``STOP_REPORT_S`` (one still running is killed: ``exit_code``
        None, ``stopped``): its start was reported, and without an end its thread would say it
        works in the background for ever, and a model waiting for its result would wait for
        nothing."""
        unreported = [job for job in self.jobs.values() if not job.reported]
        for job in unreported:
            if job.process.returncode is None:
                _kill_group(job.process)
                job.stopped = True
                job.output += STOPPED_NOTE
        for task in list(self._watchers):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for job in unreported:
            if job.stopped:  # reaped, so its transport closes while the loop still runs
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(job.process.wait(), STOP_REPORT_S)
        if unreported and self.on_exit is not None:
            for job in unreported:
                if not job.stopped and job.exit_code is None:
                    job.exit_code = job.process.returncode
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(
                    *(self.on_exit(job) for job in unreported), return_exceptions=True),
                    STOP_REPORT_S)
            for job in unreported:
                job.reported = True


def _tail(text: str) -> str:
    """The last lines of some output (at most ``TAIL_LINES`` lines and ``TAIL_CHARS``)."""
    return "".join(text.splitlines(keepends=True)[-TAIL_LINES:])[-TAIL_CHARS:]


def _kill_group(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
