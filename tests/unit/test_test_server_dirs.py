"""The run's embedded test server: where its data goes, and the data of killed runs swept."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests import pg


def _run(runs: Path, name: str, *, age_s: float, pid: int | None) -> Path:
    run = runs / name
    (run / "embedded-pg" / "pgdata").mkdir(parents=True)
    if pid is not None:
        (run / "embedded-pg" / "pgdata" / "postmaster.pid").write_text(f"{pid}\n/data\n")
    past = os.stat(run).st_mtime - age_s
    os.utime(run, (past, past))
    return run


def _dead_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    return int(proc.stdout)


def test_only_old_runs_without_a_live_server_are_swept(tmp_path: Path) -> None:
    killed = _run(tmp_path, "killed", age_s=7200, pid=_dead_pid())
    never_started = _run(tmp_path, "never-started", age_s=7200, pid=None)
    running = _run(tmp_path, "running", age_s=7200, pid=os.getpid())
    starting = _run(tmp_path, "starting", age_s=5, pid=None)

    pg.sweep_abandoned_runs(tmp_path)

    assert not killed.exists() and not never_started.exists()
    assert running.exists() and starting.exists()


def test_a_missing_directory_is_nothing_to_sweep(tmp_path: Path) -> None:
    pg.sweep_abandoned_runs(tmp_path / "absent")
    assert not (tmp_path / "absent").exists()


def test_the_root_is_a_tmpfs_with_room_or_the_temporary_directory(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pg, "TMPFS_MIN_FREE", 1)
    expected = pg.TMPFS_CANDIDATE if os.access(pg.TMPFS_CANDIDATE, os.W_OK) else None
    assert pg.embedded_root() == (expected or Path(tempfile.gettempdir()))
    monkeypatch.setattr(pg, "TMPFS_MIN_FREE", 1 << 62)  # more than any machine has
    assert pg.embedded_root() == Path(tempfile.gettempdir())
    monkeypatch.setattr(pg, "TMPFS_CANDIDATE", Path("/no/such/dir"))
    monkeypatch.setattr(pg, "TMPFS_MIN_FREE", 1)
    assert pg.embedded_root() == Path(tempfile.gettempdir())
