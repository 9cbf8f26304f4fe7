"""``bench.ab_versions``: after/before ratios per client count, each tree's import path, the
refusals of bad arguments; and ``bench.server.settle``, which waits for a started server to be
quiet (not only ready) before a point is measured."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from bench import ab_versions
from bench.server import settle


def _row(tree: str, clients: int, rate: float, **cpu: float) -> dict[str, object]:
    return {"tree": tree, "clients": clients, "rate_per_s": rate, "cpu_ms": cpu}


def test_ratios_are_after_over_before_at_each_client_count() -> None:
    rows = [_row("before", 1, 100.0, postgres=2.0, server=4.0, total=6.0),
            _row("after", 1, 150.0, postgres=1.0, server=3.0, total=4.0),
            _row("before", 16, 300.0, postgres=3.0, total=3.0),
            _row("after", 16, 240.0, postgres=3.3, total=3.3)]
    one, sixteen = ab_versions.ratios(rows)
    assert one.startswith("1 clients: rt/s 100.0 -> 150.0 (1.50x)")
    assert "postgres CPU 2.00 -> 1.00 ms (0.50)" in one
    assert "server CPU 4.00 -> 3.00 ms (0.75)" in one
    assert sixteen.startswith("16 clients: rt/s 300.0 -> 240.0 (0.80x)")
    assert "postgres CPU 3.00 -> 3.30 ms (1.10)" in sixteen
    # a process one side did not measure is left out, not divided by zero
    assert "server" not in sixteen


def test_a_client_count_measured_by_one_tree_only_gives_no_ratio() -> None:
    assert ab_versions.ratios([_row("after", 4, 10.0, postgres=1.0)]) == []


def test_the_tree_comes_first_on_its_path_and_its_own_dependencies_after() -> None:
    tree, deps = Path("/x/before"), Path("/x/deps")
    assert ab_versions.tree_path(tree, deps).split(":") == ["/x/before/src", "/x/before",
                                                             "/x/deps"]
    assert ab_versions.tree_path(tree, None).split(":") == ["/x/before/src", "/x/before"]


@pytest.mark.parametrize(("argv", "said"), [
    (["--before", "/nonexistent"], "is not a checkout of this project"),
    (["--before", str(ab_versions.ROOT)], "name the same tree"),
])
def test_bad_arguments_are_refused_before_anything_starts(
        argv: list[str], said: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["ab_versions", *argv])
    with pytest.raises(SystemExit) as exc:
        ab_versions.main()
    assert exc.value.code == 2
    assert said in capsys.readouterr().err


def test_missing_dependency_directory_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # a second "checkout": the shape main() checks (src/maxclaw and bench/)
    (tmp_path / "src" / "maxclaw").mkdir(parents=True)
    (tmp_path / "bench").mkdir()
    monkeypatch.setattr(sys, "argv", ["ab_versions", "--before", str(tmp_path),
                                      "--before-deps", str(tmp_path / "missing")])
    with pytest.raises(SystemExit):
        ab_versions.main()
    assert "is not a directory" in capsys.readouterr().err


def test_settle_waits_out_a_busy_start_and_returns_on_a_quiet_process() -> None:
    # busy for a second (as a replica importing the MCP SDK after /readyz), then idle
    busy = subprocess.Popen([sys.executable, "-c", "import time\nend = time.monotonic() + 1.0\n"
                             "while time.monotonic() < end: pass\ntime.sleep(30)"])
    try:
        # no head start: the child's interpreter start-up is busy too, then the busy second
        began = time.monotonic()
        settle(busy.pid)
        waited = time.monotonic() - began
        # not before the busy second ended; then two quiet windows of 0.25 s
        assert 0.8 <= waited < 5.0, waited
        began = time.monotonic()
        settle(busy.pid)  # already quiet: two windows
        assert time.monotonic() - began < 1.5
    finally:
        busy.kill()
        busy.wait()
