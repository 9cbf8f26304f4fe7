"""The real ``maxclaw serve`` in a subprocess: on a given database, on the embedded one (and
that Ctrl-C or SIGTERM leaves no postgres behind), and refusing an unreachable database."""

from __future__ import annotations

import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest

from tests.conftest import TEST_SECRET_KEY, ServerProcess, free_port
from tests.local_http import LOCAL_TLS

MAXCLAW = str(Path(sys.executable).parent / "maxclaw")
READY_WITHIN_S = 30.0  # the README's promise for a first start on the embedded database
# uvicorn swallows the KeyboardInterrupt it re-raises after a graceful shutdown (exit 0); an
# interrupt outside uvicorn (during start-up) exits 130
CLEAN_EXIT_ON_SIGINT = (0, 130)


@dataclass
class Serve:
    proc: subprocess.Popen[bytes]
    base_url: str
    stdout: Path
    stderr: Path

    def err(self) -> str:
        return self.stderr.read_text(errors="replace")

    def wait_ready(self, within_s: float = READY_WITHIN_S) -> float:
        """Poll /readyz until 200; returns the seconds it took. The process is external, so
        polling is the only signal there is."""
        started = time.monotonic()
        with httpx.Client(timeout=1, verify=LOCAL_TLS) as http:
            while time.monotonic() - started < within_s:
                if self.proc.poll() is not None:
                    pytest.fail(f"serve exited with {self.proc.returncode}:\n"
                                f"{self.err()[-3000:]}")
                try:
                    if http.get(self.base_url + "/readyz").status_code == 200:
                        return time.monotonic() - started
                except httpx.HTTPError:
                    pass
                time.sleep(0.1)
        pytest.fail(f"/readyz not 200 within {within_s} s:\n{self.err()[-3000:]}")

    def stop(self, sig: int = signal.SIGINT) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(timeout=30)


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """An empty MAXCLAW_DATA_DIR outside pytest's temp root. As root, the embedded server runs
    initdb as a separate ``pgserver`` user and opens the directory's parents for it; any other
    pytest session starting on this machine resets /tmp/pytest-of-<user> to 0700 and, mid-initdb,
    locks that user out ("could not open file …/global/pg_control: Permission denied")."""
    path = Path(tempfile.mkdtemp(prefix="maxclaw-e2e-"))
    yield path / "data"
    shutil.rmtree(path, ignore_errors=True)


Spawn = Callable[..., Serve]


@pytest.fixture
def spawn(tmp_path: Path, data_dir: Path) -> Iterator[Spawn]:
    """Start ``maxclaw serve ARGS`` with a clean MAXCLAW_* environment (the data directory is
    ``data_dir``, never the operator's); whatever is left running is killed afterwards."""
    started: list[Serve] = []

    def start(*args: str, env: dict[str, str] | None = None) -> Serve:
        port = free_port()
        base = {k: v for k, v in os.environ.items() if not k.startswith("MAXCLAW_")}
        out, err = tmp_path / f"serve-{port}.out", tmp_path / f"serve-{port}.err"
        with out.open("wb") as stdout, err.open("wb") as stderr:  # the child keeps its copies
            proc = subprocess.Popen(
                [MAXCLAW, "serve", "--port", str(port), *args],
                env={**base, "MAXCLAW_LOG_JSON": "true", "MAXCLAW_DATA_DIR": str(data_dir),
                     **(env or {})},
                stdout=stdout, stderr=stderr)
        serve = Serve(proc, f"http://127.0.0.1:{port}", out, err)
        started.append(serve)
        return serve

    yield start
    for serve in started:
        if serve.proc.poll() is None:
            serve.proc.kill()
            serve.proc.wait()
    # a failed test must not leave its embedded server running either
    leftovers = postgres_processes(data_dir)
    for proc in leftovers:
        proc.terminate()
    psutil.wait_procs(leftovers, timeout=10)


def postgres_processes(path: Path) -> list[psutil.Process]:
    """Processes whose command line names this data directory (the postmaster has ``-D``)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if any(str(path) in part for part in cmdline):
            found.append(proc)
    return found


def test_probes_on_a_given_database(server: ServerProcess) -> None:
    health = httpx.get(server.base_url + "/healthz", timeout=5)
    assert (health.status_code, health.json()) == (200, {"status": "ok"})
    ready = httpx.get(server.base_url + "/readyz", timeout=5)
    assert ready.status_code == 200
    metrics = httpx.get(server.base_url + "/metrics", timeout=5)
    assert metrics.status_code == 200
    assert "maxclaw_http_requests_total" in metrics.text
    # the first-run hint belongs to the embedded database only
    assert "#token=" not in server.log_path.read_text(errors="replace")


def test_the_flag_wins_over_the_environment(spawn: Spawn, database_url: str) -> None:
    closed = f"postgresql://postgres@127.0.0.1:{free_port()}/nowhere"
    serve = spawn("--database-url", database_url, env={"MAXCLAW_DATABASE_URL": closed,
                                                       "MAXCLAW_SECRET_KEY": TEST_SECRET_KEY})
    serve.wait_ready()
    assert httpx.get(serve.base_url + "/healthz", timeout=5).status_code == 200
    assert serve.stop(signal.SIGINT) in CLEAN_EXIT_ON_SIGINT


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_embedded_database_starts_and_stops(spawn: Spawn, data_dir: Path, sig: int) -> None:
    serve = spawn()
    serve.wait_ready(READY_WITHIN_S)

    pgdata = data_dir.resolve() / "pgdata"
    assert postgres_processes(pgdata), "the embedded postgres should be running in the data dir"
    match = re.search(r"http://\S+/#token=(\S+)", serve.err())
    assert match, serve.err()[-3000:]
    me = httpx.get(serve.base_url + "/v1/me", timeout=5,
                   headers={"Authorization": f"Bearer {match.group(1)}"})
    assert me.status_code == 200
    assert me.json()["name"] == "max"

    code = serve.stop(sig)
    expected = CLEAN_EXIT_ON_SIGINT if sig == signal.SIGINT else (128 + signal.SIGTERM,)
    assert code in expected, serve.err()[-3000:]
    # serve stops the server before it exits: nothing may be left running on that data dir
    assert postgres_processes(pgdata) == []
    assert "Traceback" not in serve.err()


def test_only_the_first_start_mints_a_sign_in_token(spawn: Spawn, data_dir: Path) -> None:
    """A restart on the same data directory says how to sign in without minting (and
    printing) another never-expiring token; the first link still signs in."""
    first = spawn()
    first.wait_ready(READY_WITHIN_S)
    match = re.search(r"http://\S+/#token=(\S+)", first.err())
    assert match, first.err()[-3000:]
    # the first start also creates the secret key file, owner-only, and says where
    key_file = data_dir / "secret.key"
    assert f"Created the secret key file {key_file}" in first.err()
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    key = key_file.read_text()
    assert first.stop(signal.SIGTERM) == 128 + signal.SIGTERM
    again = spawn()
    again.wait_ready(READY_WITHIN_S)
    assert "#token=<token>" in again.err() and not re.search(r"#token=[^<\s]", again.err())
    assert "maxclaw token create --user max --role user" in again.err()
    assert "Created the secret key file" not in again.err() and key_file.read_text() == key
    me = httpx.get(again.base_url + "/v1/me", timeout=5,
                   headers={"Authorization": f"Bearer {match.group(1)}"})
    assert me.status_code == 200 and me.json()["name"] == "max"
    assert again.stop(signal.SIGTERM) == 128 + signal.SIGTERM


def test_an_unreachable_database_is_one_line(spawn: Spawn, data_dir: Path) -> None:
    closed = f"postgresql://postgres@127.0.0.1:{free_port()}/nowhere"
    serve = spawn("--database-url", closed)
    code = serve.proc.wait(timeout=60)
    assert code != 0
    err = serve.err()
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("maxclaw: ")
    assert "database" in lines[0]
    assert closed in lines[0]
    assert not data_dir.exists()  # it did not fall back to the embedded server
