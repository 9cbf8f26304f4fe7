"""``python -m bench.startup``: the CPU a process of ours spends before it does its work.

Every ``maxclaw`` command and every ``serve`` start imports the app's modules and checks the
database first; ``make test`` starts about 80 of each, and an operator's script as many. This
measures, on a migrated database of its own, the CPU (user + system) of

- ``maxclaw token list`` and ``maxclaw user list``: whole commands, as an operator runs them;
- ``serve``: from its start to the first ``/readyz`` that answers 200 (read from ``/proc``).

Each is run ``--repeat`` times, interleaved, so drift hits all of them; the median and the
minimum are printed (a busy machine moves the median; the minimum is the floor of a start).
Compare two versions by running it from each checkout, alternating (docs/benchmarks.md, issue
33 item 4).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import psutil

from bench import server
from bench.pg import fresh_database
from bench.server import BENCH_SECRET_KEY

MAXCLAW = Path(sys.executable).with_name("maxclaw")


def _env(url: str) -> dict[str, str]:
    return {**os.environ, "MAXCLAW_DATABASE_URL": url, "MAXCLAW_SECRET_KEY": BENCH_SECRET_KEY,
            "MAXCLAW_MCP_PRELOAD": "false", "MAXCLAW_LOG_JSON": "true"}


def _children_cpu_s() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def command_cpu_s(url: str, args: list[str]) -> float:
    """CPU of one whole ``maxclaw`` command; it must succeed."""
    before = _children_cpu_s()
    done = subprocess.run([str(MAXCLAW), *args], env=_env(url), capture_output=True, text=True,
                          timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"maxclaw {' '.join(args)} failed: {done.stderr.strip()[-500:]}")
    return _children_cpu_s() - before


def serve_cpu_s(url: str, logs: Path) -> float:
    """CPU of ``serve`` from its start to its first ready ``/readyz``."""
    srv = server.start(url, logs / "serve.log", env=_env(url), quiet=False)
    try:
        times = psutil.Process(srv.proc.pid).cpu_times()
        return float(times.user + times.system)
    finally:
        srv.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", help="a server to use (default: as bench.pg picks)")
    parser.add_argument("--repeat", type=int, default=6)
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    logs = Path(tempfile.mkdtemp(prefix="maxclaw-bench-startup-"))
    with fresh_database(args.database_url) as url:
        items: dict[str, Callable[[], float]] = {
            "maxclaw token list": lambda: command_cpu_s(url, ["token", "list"]),
            "maxclaw user list": lambda: command_cpu_s(url, ["user", "list"]),
            "serve to ready": lambda: serve_cpu_s(url, logs),
        }
        found: dict[str, list[float]] = {name: [] for name in items}
        for round_ in range(args.repeat):
            for name, measure in items.items():
                found[name].append(measure())
            print(f"round {round_ + 1}/{args.repeat} done", file=sys.stderr, flush=True)
    print(f"{'process':20s} {'median ms':>10s} {'min ms':>8s}  (CPU, user + system)")
    for name, values in found.items():
        print(f"{name:20s} {statistics.median(values) * 1000:10.0f} "
              f"{min(values) * 1000:8.0f}  n={len(values)}")


if __name__ == "__main__":
    main()
