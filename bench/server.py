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


def start(database_url: str, log_path: Path, env: dict[str, str] | None = None,
          module: str = "maxclaw.cli") -> Server:
    """Start ``python -m <module> serve`` (the real CLI unless a prototype launcher is named)
    and wait until ``/readyz`` answers 200."""
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
                    return Server(proc, port, log_path)
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"maxclaw serve did not become ready:\n{log_path.read_text()[-3000:]}")
