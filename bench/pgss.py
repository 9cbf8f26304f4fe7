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
import subprocess
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
        "wal_bytes_per_round_trip": round(sum(int(r["wal_bytes"]) for r in top) / n),
        "statements": [{
            "query": " ".join(r["query"].split())[:160], "toplevel": r["toplevel"],
            "calls_per_round_trip": round(r["calls"] / n, 2),
            "mean_exec_ms": round(r["total_exec_time"] / max(r["calls"], 1), 4),
            "plans_per_call": round(r["plans"] / max(r["calls"], 1), 2),
            "mean_plan_ms": round(r["total_plan_time"] / max(r["plans"], 1), 4),
            "exec_ms_per_round_trip": round(r["total_exec_time"] / n, 4),
            "rows_per_call": round(r["rows"] / max(r["calls"], 1), 2),
            "blocks_dirtied_per_call": round(r["shared_blks_dirtied"] / max(r["calls"], 1), 2),
            "wal_bytes_per_call": round(int(r["wal_bytes"]) / max(r["calls"], 1))}
            for r in ours if r["calls"] >= n // 2],
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.pgss")
    parser.add_argument("--round-trips", type=int, default=300)
    parser.add_argument("--sql", type=Path, action="append", default=[],
                        help="SQL run on the migrated database before measuring (a schema "
                             "lever tried without a migration); repeatable")
    args = parser.parse_args()
    for path in args.sql:
        if not path.is_file():
            parser.error(f"--sql {path}: no such file")
    server = PrivateServer()
    base = server.start()
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
                for path in args.sql:
                    await conn.execute(path.read_text())
                version = await conn.fetchval("SHOW server_version")
            finally:
                await conn.close()
            report["server_version"] = version

        report: dict[str, Any] = {"round_trips": args.round_trips,
                                  "sql": [str(p) for p in args.sql],
                                  "loadavg_at_start": list(os.getloadavg())}
        roundtrip.run_async(extension())
        report["modes"] = roundtrip.run_async(_measure(url, db_name, args.round_trips))
    finally:
        server.stop()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "pgss.json").write_text(json.dumps(report, indent=1) + "\n")
    for name, m in report["modes"].items():
        print(f"\n{name}: {m['statements_per_round_trip']} statements, server execution "
              f"{m['exec_ms_per_round_trip']} ms, planning {m['plan_ms_per_round_trip']} ms "
              f"({m['plans_per_round_trip']} plans), backend CPU "
              f"{m['backend_cpu_ms_per_round_trip']}"
              f" ms, WAL {m['wal_bytes_per_round_trip']} B, wall {m['wall_ms_per_round_trip']} ms"
              " per round trip")
        for s in m["statements"]:
            level = "" if s["toplevel"] else "  (in a trigger) "
            print(f"  {s['calls_per_round_trip']:5.2f}× {s['mean_exec_ms']:8.4f} ms "
                  f"plan {s['plans_per_call']:4.2f}× {s['mean_plan_ms']:7.4f} ms "
                  f"{s['wal_bytes_per_call']:6d} B WAL  {level}{s['query'][:110]}")
    print(f"\nreport: {RESULTS / 'pgss.json'}")


if __name__ == "__main__":
    main()
