"""The real ``maxclaw serve`` as a subprocess on a free port, as users run it."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def rss_mb(self) -> float:
        """Resident memory of the server process (and any children), in MB."""
        proc = psutil.Process(self.proc.pid)
        total = proc.memory_info().rss
        for child in proc.children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):
                total += child.memory_info().rss
        return round(float(total) / 1e6, 1)

    def stack(self) -> dict[str, bool]:
        """Which fast paths the server process has loaded: uvicorn picks uvloop and httptools
        when they are importable (``loop="auto"``, ``http="auto"``); their extension modules
        in the process's memory map confirm it."""
        try:
            maps = Path(f"/proc/{self.proc.pid}/maps").read_text()
        except OSError:
            return {}
        return {"uvloop": "uvloop/loop." in maps, "httptools": "httptools/parser/" in maps}

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


BENCH_SECRET_KEY = "YmVuY2gtb25seS1rZXktbm90LWZvci1yZWFsLXVzZTA"


def settle(pid: int, window_s: float = 0.25, busy_share: float = 0.1,
           timeout_s: float = 10.0) -> None:
    """Wait until the process is quiet: two windows in a row below ``busy_share`` of a core.

    Ready is not idle: after /readyz a replica still imports the MCP SDK in the background
    (``MAXCLAW_MCP_PRELOAD``, ~0.4 s of CPU), and a point measured at once counted it (8% of a
    20 s profile's samples were that import). An older tree without that work settles in two
    windows."""
    proc = psutil.Process(pid)
    deadline = time.monotonic() + timeout_s
    quiet = 0
    while quiet < 2 and time.monotonic() < deadline:
        before = sum(proc.cpu_times()[:2])
        time.sleep(window_s)
        used = sum(proc.cpu_times()[:2]) - before
        quiet = quiet + 1 if used < busy_share * window_s else 0


def start(database_url: str, log_path: Path, env: dict[str, str] | None = None,
          module: str = "maxclaw.cli", quiet: bool = True) -> Server:
    """Start ``python -m <module> serve`` (the real CLI unless a prototype launcher is named)
    and wait until ``/readyz`` answers 200, then (``quiet``) until the process is idle."""
    port = free_port()
    full_env = {**os.environ, "MAXCLAW_DATABASE_URL": database_url, "MAXCLAW_LOG_JSON": "true",
                **(env or {})}
    # serve needs a secret key for an external database; a benchmark's key can be throwaway
    full_env.setdefault("MAXCLAW_SECRET_KEY", BENCH_SECRET_KEY)
    log = log_path.open("ab")
    proc = subprocess.Popen([sys.executable, "-m", module, "serve", "--port", str(port)],
                            env=full_env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    # one client for every poll: a new one per poll built an SSL context each (~22 ms of CPU)
    with httpx.Client(timeout=1) as http:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError("maxclaw serve exited early:\n"
                                   f"{log_path.read_text()[-3000:]}")
            try:
                if http.get(f"http://127.0.0.1:{port}/readyz").status_code == 200:
                    if quiet:
                        settle(proc.pid)
                    return Server(proc, port, log_path)
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"maxclaw serve did not become ready:\n{log_path.read_text()[-3000:]}")
