"""``python -m bench.ci``: CI's quick regression check (issue 33, item 5), under two minutes.

One round trip (post with ``"execute": true``, then the answer) is recorded through the service
and replayed as the floor (``bench.floor``: the minimal SQL of the same round trip on one
asyncpg connection); then, at one client, three modes take turns ``ROUNDS`` times on fresh
threads, so drift hits all of them:

- ``floor``: the replay (``bench.roundtrip.floor_point``);
- ``service``: the service objects the routes call (``service_point``, execute in the post);
- ``http``: the real ``maxclaw serve`` and a load process, two requests per round trip.

What is compared is a *ratio* measured in this run — CPU per round trip of a mode over the
floor's — never an absolute time, so a slow or busy machine does not fail the check: it slows
the floor as much as the service. A ratio more than ``TOLERANCE`` (25 %) above the committed
baseline (``bench/ci_baseline.json``) fails the step (exit status 1), and so does an item that
fails: its error is printed and written to the report, never dropped. ``--write-baseline``
stores this run's ratios as the new baseline (commit it with the change that moved them).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import roundtrip, server
from bench.loop import Samples
from bench.pg import fresh_database
from bench.run import record_round_trip

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "bench" / "ci_baseline.json"
REPORT = ROOT / "bench" / "results" / "ci.json"
TOLERANCE = 0.25
ROUNDS = 3
WARMUP_S = 1.0  # per slice
DURATION_S = 4.0  # per slice
# ratio name -> (mode, the CPU groups of that mode summed); each over the floor's total
RATIOS: dict[str, tuple[str, tuple[str, ...]]] = {
    "service_total": ("service", ("total",)),
    "service_postgres": ("service", ("postgres",)),
    "http_server_and_postgres": ("http", ("server", "postgres")),
    "http_postgres": ("http", ("postgres",)),
}


def _cpu(samples: Samples, groups: tuple[str, ...]) -> float | None:
    values = [samples.cpu_ms.get(g) for g in groups]
    if any(v is None for v in values):
        return None
    return float(sum(v for v in values if v is not None))


def ratios(points: dict[str, Samples]) -> dict[str, float]:
    """CPU per round trip of each mode over the floor's (PostgreSQL and its Python client)."""
    floor = points.get("floor")
    base = _cpu(floor, ("total",)) if floor is not None else None
    out: dict[str, float] = {}
    if not base:
        return out
    for name, (mode, groups) in RATIOS.items():
        got = points.get(mode)
        value = _cpu(got, groups) if got is not None else None
        if value is not None:
            out[name] = round(value / base, 3)
    return out


def compare(measured: dict[str, float], baseline: dict[str, float],
            tolerance: float = TOLERANCE) -> list[dict[str, Any]]:
    """One row per baseline ratio: passed unless measured > baseline * (1 + tolerance); a ratio
    the baseline has and this run lacks fails (its item failed or was not measured)."""
    rows = []
    for name, base in sorted(baseline.items()):
        got = measured.get(name)
        limit = round(base * (1 + tolerance), 3)
        ok = got is not None and got <= limit
        rows.append({"ratio": name, "baseline": base, "limit": limit, "measured": got,
                     "passed": ok})
    return rows


async def _modes(url: str, log_dir: Path, failures: dict[str, str]) -> dict[str, Samples]:
    script, _ = await record_round_trip(url)
    parts: dict[str, list[Samples]] = {"floor": [], "service": [], "http": []}
    async with roundtrip.in_process(url) as services:
        ids = await roundtrip.make_identities(services, "ci", 1)
        srv = None
        try:
            srv = await asyncio.to_thread(server.start, url, log_dir / "serve-ci.log")
        except Exception as exc:  # recorded; the other modes still run
            failures["http"] = f"{type(exc).__name__}: {exc}"
        try:
            for r in range(ROUNDS):
                for mode in list(parts):
                    if mode in failures:
                        continue
                    tag = f"ci{r}{mode[0]}"
                    try:
                        stocks = await roundtrip.make_stocks(
                            url, ids, roundtrip.stock_size(1, WARMUP_S + DURATION_S))
                        got: Samples
                        if mode == "floor":
                            got = await roundtrip.floor_point(
                                url, ids, stocks, tag, WARMUP_S, DURATION_S,
                                roundtrip.ReplayFloor(script))
                        elif mode == "service":
                            got = await roundtrip.service_point(
                                url, services, ids, stocks, tag, WARMUP_S, DURATION_S,
                                bool(script.execute_in_post))
                        else:
                            assert srv is not None
                            got, _ = await roundtrip.http_point(
                                url, srv, ids, stocks, tag, WARMUP_S, DURATION_S, True)
                        if got.errors:
                            raise RuntimeError(f"{got.errors} round trip(s) failed: "
                                               f"{got.first_error}")
                        parts[mode].append(got)
                    except Exception as exc:  # recorded with its error, never dropped
                        failures[mode] = f"{type(exc).__name__}: {exc}"
                        traceback.print_exc()
        finally:
            if srv is not None:
                srv.stop()
    return {m: Samples.merge(p) for m, p in parts.items() if p and m not in failures}


def run(database_url: str | None, baseline_path: Path, write_baseline: bool,
        out: Path) -> int:
    started = time.monotonic()
    load_before = os.getloadavg()
    failures: dict[str, str] = {}
    log_dir = Path(tempfile.mkdtemp(prefix="maxclaw-bench-ci-"))
    with fresh_database(database_url) as url:
        points = roundtrip.run_async(_modes(url, log_dir, failures))
    measured = ratios(points)
    report: dict[str, Any] = {
        "suite": "maxclaw-bench-ci", "tolerance": TOLERANCE, "rounds": ROUNDS,
        "slice_s": {"warmup": WARMUP_S, "duration": DURATION_S},
        "load_average": {"before": load_before, "after": os.getloadavg()},
        "points": {m: s.result(1) for m, s in points.items()},
        "failed": failures, "ratios": measured}
    print(f"\n{'mode':<8} {'round trips':>11} {'rate/s':>8}  CPU ms per round trip")
    for mode, s in points.items():
        r = s.result(1)
        print(f"{mode:<8} {r['round_trips']:>11} {r['rate_per_s']:>8}  "
              f"{json.dumps(r['cpu_ms_per_round_trip'])}")
    for mode, error in failures.items():
        print(f"{mode:<8} FAILED: {error}")
    status = 1 if failures else 0
    if write_baseline:
        if failures or not measured:
            print("not writing a baseline from a run with failures")
            status = 1
        else:
            baseline_path.write_text(json.dumps(
                {"note": "CPU per round trip over the floor's, one client, python -m bench.ci",
                 "ratios": measured}, indent=1) + "\n")
            print(f"baseline written: {baseline_path}")
    else:
        baseline = json.loads(baseline_path.read_text())["ratios"]
        rows = compare(measured, baseline)
        report["verdicts"] = rows
        print(f"\n{'ratio (over the floor)':<26} {'baseline':>8} {'limit':>7} {'now':>7}")
        for row in rows:
            print(f"{row['ratio']:<26} {row['baseline']:>8} {row['limit']:>7} "
                  f"{row['measured']!s:>7}  {'ok' if row['passed'] else 'WORSE'}")
        if not all(row["passed"] for row in rows):
            status = 1
    report["duration_s"] = round(time.monotonic() - started, 1)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"\n{report['duration_s']} s, load average {report['load_average']}; report: {out}")
    return status


def main(argv: list[str] | None = None,
         runner: Callable[..., int] = run) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ci",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", help="a PostgreSQL server (a fresh database is "
                        "created on it and dropped); default: 127.0.0.1:5432, else embedded")
    parser.add_argument("--baseline", type=Path, default=BASELINE)
    parser.add_argument("--write-baseline", action="store_true",
                        help="store this run's ratios as the baseline instead of comparing")
    parser.add_argument("--out", type=Path, default=REPORT)
    args = parser.parse_args(argv)
    sys.exit(runner(args.database_url, args.baseline, args.write_baseline, args.out))

if __name__ == "__main__":
    main()
