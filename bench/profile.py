"""Find the cost before cutting it: profiles of the round trip.

``python -m bench.profile inproc [--clients N] [--seconds S]``
    (b) in-process under pyinstrument; prints the call tree and writes an HTML profile.
``python -m bench.profile server [--clients N] [--seconds S] [--mode x|c]``
    a real ``maxclaw serve`` under ``py-spy record`` while the HTTP load runs — (x), the
    agent's two-request round trip (``"execute": true``), or (c), three requests; prints
    where the server's samples go (inclusive share per component, top self frames).
``python -m bench.profile postgres [--clients N] [--seconds S] [--mode x|c]``
    the same load, with Linux ``perf`` sampling every PostgreSQL backend of the database
    (the server's pool, its LISTEN connection); prints where the backends' CPU goes by
    PostgreSQL function (inclusive share per stage, top self symbols). Needs ``perf`` and
    the right to trace the server's processes (root, or ``perf_event_paranoid`` <= 1).

Both use a fresh database on the suite's PostgreSQL and drop it afterwards.
"""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import roundtrip, server
from bench.loop import closed_loop
from bench.pg import BenchDatabase, choose_server


def _py_spy() -> str:
    """py-spy from this environment's bin (a venv not on PATH), else from PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    found = str(beside) if beside.exists() else shutil.which("py-spy")
    if found is None:
        raise SystemExit("py-spy not found: pip install py-spy (the bench extra has it)")
    return found

RESULTS = Path(__file__).resolve().parent / "results"

# Where a sample's time goes, by the first matching frame on its stack (most specific first).
BUCKETS = [
    ("auth (token lookup)", ("authenticate",)),
    ("pydantic validation", ("pydantic", "model_validate", "validate_python")),
    ("JSON encode/decode", ("json/encoder", "json/decoder", "jsonable_encoder", "dumps",
                            "loads")),
    ("logging", ("logging/", "logs.py")),
    ("asyncpg (driver)", ("asyncpg/",)),
    ("FastAPI/Starlette routing + deps", ("fastapi/", "starlette/")),
    ("uvicorn/httptools (HTTP)", ("uvicorn/", "httptools")),
    ("event loop / idle", ("uvloop", "asyncio/", "select", "epoll")),
]


async def _inproc(url: str, clients: int, seconds: float) -> None:
    from pyinstrument import Profiler

    async with roundtrip.in_process(url) as services:
        ids = await roundtrip.make_identities(services, "prof", clients)
        stocks = await roundtrip.make_stocks(url, ids, roundtrip.stock_size(clients, seconds + 1))
        rts = [roundtrip.service_round_trip(services, ids[n], stocks[n], f"p{n}")
               for n in range(clients)]
        await closed_loop(rts, 0.0, 1.0)  # warm prepared statements
        profiler = Profiler(async_mode="disabled", interval=0.0005)
        profiler.start()
        samples = await closed_loop(rts, 0.0, seconds)
        profiler.stop()
    print(samples.result(clients)["rate_per_s"], "round trips/s under the profiler")
    print(profiler.output_text(unicode=True, color=False, show_all=False))
    out = RESULTS / f"profile-inproc-{clients}.html"
    out.write_text(profiler.output_html())
    print(f"HTML profile: {out}")


# Leaf frames that mean "waiting", not working: a thread parked on a condition, the event loop
# blocked in its C poll (``Runner.run`` is the last Python frame above uvloop's run loop).
IDLE_LEAVES = ("Condition.wait", "Runner.run", "Event.wait", "select", "_worker")


def summarize_collapsed(path: Path) -> dict[str, Any]:
    """Share of the busy samples per bucket, and the top self frames, from py-spy's output."""
    total = idle = 0
    buckets: collections.Counter[str] = collections.Counter()
    selfs: collections.Counter[str] = collections.Counter()
    for line in path.read_text().splitlines():
        stack, _, count_s = line.rpartition(" ")
        count = int(count_s)
        frames = stack.split(";")
        if frames[-1].startswith(IDLE_LEAVES):
            idle += count
            continue
        total += count
        selfs[frames[-1]] += count
        for name, needles in BUCKETS:
            if any(n in f for f in frames for n in needles):
                buckets[name] += count
                break
        else:
            buckets["other (service code)"] += count
    return {"samples": total, "idle_samples": idle,
            "share": {k: round(v / total, 3) for k, v in buckets.most_common()},
            "top_self": [(k, round(v / total, 3)) for k, v in selfs.most_common(25)]}


def _print_shares(title: str, summary: dict[str, Any], leaves: str) -> None:
    """A summary's shares per bucket, then its top leaves, one per line."""
    print(title)
    for name, share in summary["share"].items():
        print(f"  {share:6.1%}  {name}")
    print(leaves)
    for frame, share in summary["top_self"]:
        print(f"  {share:6.1%}  {frame}")


def _identities_and_stocks(url: str, clients: int, seconds: float) -> tuple[list[Any], list[Any]]:
    """The load's users and enough fresh threads for ``seconds`` of round trips."""

    async def prepare() -> tuple[list[Any], list[Any]]:
        async with roundtrip.in_process(url) as services:
            ids = await roundtrip.make_identities(services, "prof", clients)
        stocks = await roundtrip.make_stocks(url, ids, roundtrip.stock_size(clients, seconds))
        return ids, stocks

    result: tuple[list[Any], list[Any]] = roundtrip.run_async(prepare())
    return result


def _server(url: str, clients: int, seconds: float, mode: str = "x",
            native: bool = False) -> None:
    logs = Path(tempfile.mkdtemp(prefix="maxclaw-profile-"))
    ids, stocks = _identities_and_stocks(url, clients, seconds + 3)
    srv = server.start(url, logs / "serve.log")
    out = RESULTS / f"profile-server-{mode}-{clients}{'-native' if native else ''}.txt"
    try:
        spy = subprocess.Popen([_py_spy(), "record", "--pid", str(srv.proc.pid), "--duration",
                                str(int(seconds)), "--rate", "250", "--format", "raw",
                                "--output", str(out),
                                # --native (C frames: asyncpg's protocol, uvloop, httptools)
                                # has to pause the process for each sample
                                *(["--native"] if native else ["--nonblocking"])],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        samples, _ = roundtrip.run_async(
            roundtrip.http_point(url, srv, ids, stocks, "prof", 1.0, seconds, mode == "x"))
        spy.wait(60)
    finally:
        srv.stop()
    print(samples.result(clients)["rate_per_s"], "round trips/s while sampled")
    summary = summarize_collapsed(out)
    _print_shares(f"{summary['samples']} busy samples of the server process "
                  f"({summary['idle_samples']} idle ones left out); share of the busy ones:",
                  summary, "top self frames:")
    print(f"collapsed stacks: {out}")


# Where a backend sample's time goes: the first stage of this list with a function anywhere on
# the sample's stack (so a trigger's statements count as the trigger, a commit's deferred
# triggers as the commit). ``standard_ExecutorStart`` is its own stage: pg_stat_statements'
# execution time leaves it out (it times ExecutorRun and ExecutorFinish), and it is where a
# cached plan's per-execution set-up goes (generated columns' expressions read and planned,
# indexes opened).
PG_BUCKETS = [
    ("commit (WAL flush, NOTIFY queue, locks released)", ("CommitTransaction",
                                                           "AbortTransaction")),
    ("NOTIFY (pg_notify in triggers)", ("pg_notify", "Async_Notify")),
    ("LISTEN delivery (the listener backend)", ("ProcessIncomingNotify", "ProcessNotifyInterrupt",
                                                "asyncQueueReadAllNotifications")),
    ("GIN index inserts (search)", ("ginHeapTupleInsert", "gininsert", "ginInsert")),
    ("other index inserts", ("index_insert", "ExecInsertIndexTuples")),
    ("triggers (PL/pgSQL, RI checks)", ("ExecCallTriggerFunc", "AfterTriggerFireDeferred",
                                        "AfterTriggerEndQuery", "ExecBRInsertTriggers",
                                        "ExecBRUpdateTriggers", "RI_FKey")),
    ("statement start (ExecutorStart)", ("standard_ExecutorStart",)),
    ("CHECK constraints (read and planned per statement)", ("ExecConstraints",)),
    ("generated columns computed", ("ExecComputeStoredGenerated",)),
    ("executor (the statements' own work)", ("ExecutorRun", "standard_ExecutorRun",
                                             "PortalRun")),
    ("bind / planner / parse", ("exec_bind_message", "exec_parse_message", "pg_plan_query",
                                "GetCachedPlan")),
    ("protocol and socket I/O", ("pq_", "secure_read", "secure_write", "ReadCommand",
                                 "socket_")),
]


def summarize_perf(script_text: str) -> dict[str, Any]:
    """Bucket ``perf script`` stacks (leaf first, as perf prints them) by PG_BUCKETS."""
    buckets: collections.Counter[str] = collections.Counter()
    selfs: collections.Counter[str] = collections.Counter()
    total = 0
    for block in script_text.split("\n\n"):
        lines = [ln.strip() for ln in block.strip().splitlines()]
        if len(lines) < 2:
            continue
        frames = [ln.split(None, 1)[1].split(" (", 1)[0] if " " in ln else ln
                  for ln in lines[1:]]
        frames = [f.split("+0x", 1)[0] for f in frames]
        total += 1
        selfs[frames[0]] += 1
        outer_first = list(reversed(frames))
        for name, needles in PG_BUCKETS:
            if any(f.startswith(n) for f in outer_first for n in needles):
                buckets[name] += 1
                break
        else:
            buckets["other"] += 1
    return {"samples": total,
            "share": {k: round(v / max(total, 1), 3) for k, v in buckets.most_common()},
            "top_self": [(k, round(v / max(total, 1), 3)) for k, v in selfs.most_common(30)]}


async def _table_writes(url: str) -> list[dict[str, Any]]:
    """Rows inserted, updated (HOT or not) and deleted per table since the database was made
    (the server has stopped: its backends' counters are flushed when they exit)."""
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        await conn.execute("SELECT pg_stat_clear_snapshot()")
        rows = await conn.fetch(
            "SELECT relname, n_tup_ins AS ins, n_tup_upd AS upd, n_tup_hot_upd AS hot,"
            " n_tup_del AS del FROM pg_stat_user_tables"
            " WHERE n_tup_ins + n_tup_upd + n_tup_del > 0 ORDER BY relname")
    finally:
        await conn.close()
    return [dict(r) for r in rows]


def _postgres(url: str, clients: int, seconds: float, mode: str = "x") -> None:
    import threading
    import time

    import asyncpg

    perf = shutil.which("perf")
    if perf is None:
        raise SystemExit("perf not found: apt-get install linux-perf (Debian)")
    logs = Path(tempfile.mkdtemp(prefix="maxclaw-profile-"))

    async def backends() -> list[int]:
        conn = await asyncpg.connect(url)
        try:
            rows = await conn.fetch("SELECT pid FROM pg_stat_activity WHERE datname ="
                                    " current_database() AND pid <> pg_backend_pid()")
        finally:
            await conn.close()
        return [int(r["pid"]) for r in rows]

    ids, stocks = _identities_and_stocks(url, clients, seconds + 6)
    srv = server.start(url, logs / "serve.log")
    data = RESULTS / f"perf-postgres-{mode}-{clients}.data"
    recorder: dict[str, Any] = {}

    def record() -> None:
        time.sleep(3.0)  # the load's warm-up: the pool has opened its connections
        pids = roundtrip.run_async(backends())
        recorder["pids"] = pids
        recorder["proc"] = subprocess.run(
            [perf, "record", "-F", "997", "--call-graph", "dwarf,16384", "-o", str(data),
             "-p", ",".join(map(str, pids)), "--", "sleep", str(seconds)],
            capture_output=True, text=True, check=False)

    thread = threading.Thread(target=record)
    try:
        thread.start()
        samples, _ = roundtrip.run_async(
            roundtrip.http_point(url, srv, ids, stocks, "prof", 2.0, seconds + 3.0,
                                 mode == "x"))
        thread.join()
    finally:
        srv.stop()
    if recorder["proc"].returncode != 0:
        raise SystemExit(f"perf record failed: {recorder['proc'].stderr[-2000:]}")
    writes = roundtrip.run_async(_table_writes(url))
    script = subprocess.run([perf, "script", "-i", str(data), "-F", "comm,pid,ip,sym"],
                            capture_output=True, text=True, check=True).stdout
    summary = summarize_perf(script)
    out = RESULTS / f"profile-postgres-{mode}-{clients}.json"
    out.write_text(json.dumps(summary, indent=1) + "\n")
    print(samples.result(clients)["rate_per_s"], "round trips/s while sampled;",
          len(recorder["pids"]), "backends sampled")
    _print_shares(f"{summary['samples']} samples of the backends; share per stage (the first"
                  " of PG_BUCKETS on the stack):", summary, "top self symbols:")
    done = max(samples.completed, 1)
    print("rows written per round trip, by table (the whole run, warm-up included; HOT: "
          "updates that wrote no index entry):")
    for row in writes:
        print(f"  {row['relname']:24s} ins {row['ins'] / done:5.2f}  upd {row['upd'] / done:5.2f}"
              f" (HOT {row['hot'] / done:5.2f})  del {row['del'] / done:5.2f}")
    print(f"perf data: {data} (perf report -i {data} --no-children); summary: {out}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.profile")
    parser.add_argument("what", choices=["inproc", "server", "postgres"])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--mode", choices=["x", "c"], default="x",
                        help="server: x = two requests (post with execute: true), c = three")
    parser.add_argument("--native", action="store_true",
                        help="server: sample C frames too (pauses the process per sample)")
    parser.add_argument("--database-url")
    args = parser.parse_args()
    pg = choose_server(args.database_url)
    db = BenchDatabase(pg)
    url = db.create()
    RESULTS.mkdir(exist_ok=True)
    try:
        if args.what == "inproc":
            roundtrip.run_async(_inproc(url, args.clients, args.seconds))
        elif args.what == "postgres":
            _postgres(url, args.clients, args.seconds, args.mode)
        else:
            _server(url, args.clients, args.seconds, args.mode, args.native)
    finally:
        db.drop()
        pg.stop()


if __name__ == "__main__":
    main()
