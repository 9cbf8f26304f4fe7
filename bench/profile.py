"""Find the cost before cutting it: profiles of the round trip.

``python -m bench.profile inproc [--clients N] [--seconds S]``
    (b) in-process under pyinstrument; prints the call tree and writes an HTML profile.
``python -m bench.profile server [--clients N] [--seconds S] [--mode x|c]``
    a real ``maxclaw serve`` under ``py-spy record`` while the HTTP load runs — (x), the
    agent's two-request round trip (``"execute": true``), or (c), three requests; prints
    where the server's samples go (inclusive share per component, top self frames).

Both use a fresh database on the suite's PostgreSQL and drop it afterwards.
"""

from __future__ import annotations

import argparse
import collections
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


def _server(url: str, clients: int, seconds: float, mode: str = "x",
            native: bool = False) -> None:
    logs = Path(tempfile.mkdtemp(prefix="maxclaw-profile-"))

    async def prepare() -> tuple[list[Any], list[Any]]:
        async with roundtrip.in_process(url) as services:
            ids = await roundtrip.make_identities(services, "prof", clients)
        stocks = await roundtrip.make_stocks(url, ids,
                                             roundtrip.stock_size(clients, seconds + 3))
        return ids, stocks

    ids, stocks = roundtrip.run_async(prepare())
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
    print(f"{summary['samples']} busy samples of the server process ({summary['idle_samples']} "
          "idle ones left out); share of the busy ones:")
    for name, share in summary["share"].items():
        print(f"  {share:6.1%}  {name}")
    print("top self frames:")
    for frame, share in summary["top_self"]:
        print(f"  {share:6.1%}  {frame}")
    print(f"collapsed stacks: {out}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.profile")
    parser.add_argument("what", choices=["inproc", "server"])
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
        else:
            _server(url, args.clients, args.seconds, args.mode, args.native)
    finally:
        db.drop()
        pg.stop()


if __name__ == "__main__":
    main()
