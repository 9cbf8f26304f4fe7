"""PostgreSQL's cost per statement of a round trip, from ``pg_stat_statements``.

``python -m bench.pgss [--round-trips N]``

The shared server at 127.0.0.1:5432 has the extension but not preloaded (that needs a restart
of a server other people use), so this starts a private PostgreSQL of the same major version
(the system's ``initdb``/``pg_ctl``, fsync on, ``shared_preload_libraries =
pg_stat_statements``, ``track = all`` so statements inside triggers count too) on a free port,
migrates a database, and runs round trips through the service objects on one client, the same
number each way, in one run:

- ``two requests``: ``AgentMessageService.post`` then ``ToolService.execute``, then the answer;
- ``execute in the post``: the post carrying ``"execute": true``, then the answer.

For each, ``pg_stat_statements`` is reset before and read after: per statement the calls per
round trip, the server's execution time per call (on an otherwise idle private server with one
client, time spent in the backend: CPU, plus the WAL flush of a COMMIT), rows, buffers dirtied
and WAL written; and the backends' CPU per round trip (psutil). Writes
``bench/results/pgss.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import cpu, roundtrip
from bench.server import free_port
from maxclaw.db import migrate
from maxclaw.db.database import connect

RESULTS = Path(__file__).resolve().parent / "results"
READ = """
SELECT query, calls, total_exec_time, plans, total_plan_time, rows, shared_blks_hit,
       shared_blks_read, shared_blks_dirtied, wal_records, wal_bytes, toplevel
  FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1)
 ORDER BY total_exec_time DESC
"""


def _bin(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    for major in ("15", "16", "17", "14"):
        path = Path(f"/usr/lib/postgresql/{major}/bin/{name}")
        if path.exists():
            return str(path)
    raise SystemExit(f"{name} not found: this needs PostgreSQL's server binaries")


class PrivateServer:
    """A throwaway cluster with pg_stat_statements preloaded, run as the postgres user."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="maxclaw-pgss-"))
        self.port = free_port()
        self.as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    def start(self) -> str:
        if self.as_user:
            shutil.chown(self.dir, "postgres")
        data = self.dir / "data"
        subprocess.run([*self.as_user, _bin("initdb"), "-D", str(data), "-A", "trust", "-U",
                        "postgres"], check=True, capture_output=True)
        opts = (f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 "
                "-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all "
                "-c pg_stat_statements.track_planning=on "
                "-c fsync=on -c synchronous_commit=on")
        subprocess.run([*self.as_user, _bin("pg_ctl"), "-D", str(data), "-o", opts, "-l",
                        str(self.dir / "log"), "-w", "start"], check=True, capture_output=True)
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def stop(self) -> None:
        subprocess.run([*self.as_user, _bin("pg_ctl"), "-D", str(self.dir / "data"), "-m",
                        "fast", "stop"], check=False, capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)


async def _measure(url: str, db_name: str, round_trips: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    admin = await connect(url)
    try:
        async with roundtrip.in_process(url, pool_max=2) as services:
            ident = (await roundtrip.make_identities(services, "pgss", 1))[0]
            for name, in_post in (("two requests", False), ("execute in the post", True),
                                  ("two requests, again", False)):
                stock = (await roundtrip.make_stocks(url, [ident], round_trips + 30))[0]
                rt = roundtrip.service_round_trip(services, ident, stock,
                                                  f"s{len(out)}", in_post)
                for _ in range(30):  # warm: prepared statements, caches
                    await rt()
                # Statistics as autovacuum would have them by now. Without them the first
                # mode's plans were made for near-empty tables and kept (a cached generic plan
                # is only remade when the table's statistics change): the answer's mirror read
                # the user's every message through ``messages_user_sync``, a cost that grew
                # with each round trip (2.9 → 5.8 ms per answer over the three modes). The
                # ANALYZE invalidates them; the second warm-up plans again.
                await admin.execute("ANALYZE")
                for _ in range(30):
                    await rt()
                await admin.execute("SELECT pg_stat_statements_reset()")
                meter = cpu.Meter()
                pids = await cpu.backend_pids(admin)
                meter.start(pids)
                t0 = time.perf_counter()
                for _ in range(round_trips):
                    await rt()
                wall = time.perf_counter() - t0
                used = meter.stop({"postgres": await cpu.backend_pids(admin)})
                rows = [dict(r) for r in await admin.fetch(READ, db_name)]
                out[name] = _summary(rows, round_trips, wall, used["postgres"])
    finally:
        await admin.close()
    return out


def _summary(rows: list[dict[str, Any]], n: int, wall: float, pg_cpu: float) -> dict[str, Any]:
    ours = [r for r in rows if "pg_stat_statements" not in r["query"]
            and "pg_stat_activity" not in r["query"]]
    top = [r for r in ours if r["toplevel"]]
    return {
        "round_trips": n, "wall_ms_per_round_trip": round(wall * 1000 / n, 3),
        "backend_cpu_ms_per_round_trip": round(pg_cpu * 1000 / n, 3),
        "statements_per_round_trip": round(sum(r["calls"] for r in top) / n, 2),
        "exec_ms_per_round_trip": round(sum(r["total_exec_time"] for r in top) / n, 3),
        # planning is not in the execution time: a statement planned on every call (a custom
        # plan) pays it each time; a cached generic plan only once
        "plan_ms_per_round_trip": round(sum(r["total_plan_time"] for r in top) / n, 3),
        "plans_per_round_trip": round(sum(r["plans"] for r in top) / n, 2),
        # statements run by triggers and functions are planned inside their caller's execution
        # (so their planning is in its exec time), and only this column shows it: the Live
        # Activity refresh's 0.25 ms per round trip hid here (docs/benchmarks.md, issue 33)
        "nested_plan_ms_per_round_trip": round(
            sum(r["total_plan_time"] for r in ours if not r["toplevel"]) / n, 3),
        "wal_bytes_per_round_trip": round(sum(int(r["wal_bytes"]) for r in top) / n),
        "statements": [{
            "query": " ".join(r["query"].split())[:160], "toplevel": r["toplevel"],
            "calls_per_round_trip": round(r["calls"] / n, 2),
            "mean_exec_ms": round(r["total_exec_time"] / max(r["calls"], 1), 4),
            "plans_per_call": round(r["plans"] / max(r["calls"], 1), 2),
            "mean_plan_ms": round(r["total_plan_time"] / max(r["plans"], 1), 4),
            "plan_ms_per_round_trip": round(r["total_plan_time"] / n, 4),
            "exec_ms_per_round_trip": round(r["total_exec_time"] / n, 4),
            "rows_per_call": round(r["rows"] / max(r["calls"], 1), 2),
            "blocks_dirtied_per_call": round(r["shared_blks_dirtied"] / max(r["calls"], 1), 2),
            "wal_bytes_per_call": round(int(r["wal_bytes"]) / max(r["calls"], 1))}
            for r in ours if r["calls"] >= n // 2],
    }


def run_once(sql: list[Path], round_trips: int) -> dict[str, Any]:
    """One measurement on its own private server: migrate, run ``sql``, measure every mode."""
    server = PrivateServer()
    base = server.start()
    report: dict[str, Any] = {"round_trips": round_trips, "sql": [str(p) for p in sql],
                              "loadavg_at_start": list(os.getloadavg())}
    try:
        db_name = "maxclaw_pgss"
        import asyncpg

        async def create() -> None:
            conn = await asyncpg.connect(base)
            try:
                await conn.execute(f"CREATE DATABASE {db_name}")
            finally:
                await conn.close()

        roundtrip.run_async(create())
        url = base.rsplit("/", 1)[0] + f"/{db_name}"
        migrate.upgrade(url)

        async def extension() -> None:
            conn = await asyncpg.connect(url)
            try:
                await conn.execute("CREATE EXTENSION pg_stat_statements")
                for path in sql:
                    await conn.execute(path.read_text())
                version = await conn.fetchval("SHOW server_version")
            finally:
                await conn.close()
            report["server_version"] = version

        roundtrip.run_async(extension())
        report["modes"] = roundtrip.run_async(_measure(url, db_name, round_trips))
    finally:
        server.stop()
    return report


TOTALS = ("exec_ms_per_round_trip", "plan_ms_per_round_trip", "nested_plan_ms_per_round_trip",
          "backend_cpu_ms_per_round_trip", "wal_bytes_per_round_trip", "wall_ms_per_round_trip")


STATEMENT_FIGURES = ("exec_ms_per_round_trip", "plan_ms_per_round_trip", "calls_per_round_trip")


def _statement_key(s: dict[str, Any]) -> str:
    return ("" if s["toplevel"] else "(nested) ") + str(s["query"])


def compare(base: list[dict[str, Any]], lever: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians of the runs of each side, per mode: the totals, and per statement its execution
    and planning per round trip, the statements that moved most first. A run's totals move
    with the machine's speed (±20% between one-minute runs seen here); a statement's own
    figures are what a small lever can be read by."""
    out: dict[str, Any] = {}
    for mode in base[0]["modes"]:
        sides = {"base": [r["modes"][mode] for r in base],
                 "lever": [r["modes"][mode] for r in lever]}
        totals = {k: {side: statistics.median(float(m[k]) for m in runs)
                      for side, runs in sides.items()} for k in TOTALS}
        per: dict[str, dict[str, list[float]]] = {}
        for side, runs in sides.items():
            for m in runs:
                # statements whose first 160 characters agree are one item (summed per run)
                summed: dict[str, dict[str, float]] = {}
                for st in m["statements"]:
                    one = summed.setdefault(_statement_key(st), dict.fromkeys(STATEMENT_FIGURES,
                                                                              0.0))
                    for k in STATEMENT_FIGURES:
                        one[k] += float(st[k])
                for key, figures in summed.items():
                    item = per.setdefault(key, {})
                    for k, v in figures.items():
                        item.setdefault(f"{side}_{k}", []).append(v)
        n = {side: len(runs) for side, runs in sides.items()}
        statements = []
        for query, item in per.items():
            row: dict[str, Any] = {"query": query}
            for side in sides:
                for k in STATEMENT_FIGURES:
                    # a statement a run did not have counts as 0 in it
                    values = item.get(f"{side}_{k}", [])
                    values = values + [0.0] * (n[side] - len(values))
                    row[f"{side}_{k}"] = round(statistics.median(values), 4)
            row["delta_ms"] = round(
                row["lever_exec_ms_per_round_trip"] + row["lever_plan_ms_per_round_trip"]
                - row["base_exec_ms_per_round_trip"] - row["base_plan_ms_per_round_trip"], 4)
            statements.append(row)
        statements.sort(key=lambda r: -abs(r["delta_ms"]))
        out[mode] = {"totals": totals, "statements": statements}
    return out


def _print_run(report: dict[str, Any]) -> None:
    for name, m in report["modes"].items():
        print(f"\n{name}: {m['statements_per_round_trip']} statements, server execution "
              f"{m['exec_ms_per_round_trip']} ms, planning {m['plan_ms_per_round_trip']} ms "
              f"({m['plans_per_round_trip']} plans; {m['nested_plan_ms_per_round_trip']} ms in "
              f"triggers and functions), backend CPU {m['backend_cpu_ms_per_round_trip']}"
              f" ms, WAL {m['wal_bytes_per_round_trip']} B, wall {m['wall_ms_per_round_trip']} ms"
              " per round trip")
        for s in m["statements"]:
            level = "" if s["toplevel"] else "  (in a trigger) "
            print(f"  {s['calls_per_round_trip']:5.2f}× {s['mean_exec_ms']:8.4f} ms "
                  f"plan {s['plans_per_call']:4.2f}× {s['mean_plan_ms']:7.4f} ms "
                  f"{s['wal_bytes_per_call']:6d} B WAL  {level}{s['query'][:110]}")


def _print_comparison(result: dict[str, Any], runs: int) -> None:
    for mode, m in result.items():
        print(f"\n{mode}: medians of {runs} runs each, base → lever, per round trip")
        for k, v in m["totals"].items():
            print(f"  {k:32s} {v['base']:10.3f} → {v['lever']:10.3f}")
        print("  statements that moved (exec + plan ms per round trip, base → lever):")
        for row in m["statements"][:12]:
            if abs(row["delta_ms"]) < 0.005:
                break
            base = row["base_exec_ms_per_round_trip"] + row["base_plan_ms_per_round_trip"]
            lever = row["lever_exec_ms_per_round_trip"] + row["lever_plan_ms_per_round_trip"]
            print(f"  {base:8.4f} → {lever:8.4f} ({row['delta_ms']:+.4f})  {row['query'][:100]}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.pgss")
    parser.add_argument("--round-trips", type=int, default=300)
    parser.add_argument("--sql", type=Path, action="append", default=[],
                        help="SQL run on the migrated database before measuring (a schema "
                             "lever tried without a migration); repeatable")
    parser.add_argument("--compare", type=Path, metavar="LEVER.sql",
                        help="measure without and with this SQL (after any --sql), "
                             "alternating, --repeat times each, and print the medians")
    parser.add_argument("--repeat", type=int, default=3,
                        help="with --compare: runs of each side (default 3)")
    args = parser.parse_args()
    for path in [*args.sql, *([args.compare] if args.compare else [])]:
        if not path.is_file():
            parser.error(f"{path}: no such file")
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    if args.round_trips < 1:
        parser.error("--round-trips must be at least 1")
    RESULTS.mkdir(exist_ok=True)
    if args.compare is None:
        report = run_once(args.sql, args.round_trips)
        (RESULTS / "pgss.json").write_text(json.dumps(report, indent=1) + "\n")
        _print_run(report)
        print(f"\nreport: {RESULTS / 'pgss.json'}")
        return
    runs: dict[str, list[dict[str, Any]]] = {"base": [], "lever": []}
    for i in range(args.repeat):
        for side, sql in (("base", args.sql), ("lever", [*args.sql, args.compare])):
            print(f"run {i + 1}/{args.repeat}, {side} (load average "
                  f"{os.getloadavg()[0]:.2f}) …", file=sys.stderr, flush=True)
            runs[side].append(run_once(sql, args.round_trips))
    result = compare(runs["base"], runs["lever"])
    out = RESULTS / "pgss-compare.json"
    out.write_text(json.dumps({"lever": str(args.compare), "sql": [str(p) for p in args.sql],
                               "repeat": args.repeat, "round_trips": args.round_trips,
                               "comparison": result, "runs": runs}, indent=1) + "\n")
    _print_comparison(result, args.repeat)
    print(f"\nreport: {out}")


if __name__ == "__main__":
    main()
