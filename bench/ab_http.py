"""Before/after of a server-side change: the HTTP round trip against two code trees, same run.

``python -m bench.ab_http --before <checkout> [--after <checkout>] [--clients 1,4,16]
[--rounds 3] [--seconds 3] [--mode x|c] [--after-socket /var/run/postgresql]
[--cards N] [--before-sql FILE --after-sql FILE] [--before-env K=V] [--after-env K=V]
[--third <checkout> [--third-env K=V]]``

Each tree gets its own ``maxclaw serve`` (``PYTHONPATH=<tree>/src``) on one fresh database;
at each client count the two take turns ``--rounds`` times (fresh threads each turn, 0.5 s
warm-up), so the neighbours' load hits both alike; the slices are merged per tree. Printed per
point: round trips/s, p50, and CPU per round trip by process (server, PostgreSQL backends,
load generator) — on a shared machine the CPU a round trip consumes is the steadier figure.
``--after`` defaults to this checkout, ``--before`` too when the change is in the database:
``--before-sql`` / ``--after-sql`` are run on the database before each slice of their side
(e.g. a trigger function's old and new body, ``bench/ab/``), and ``--cards`` loads that many
cards first (``bench.dataset``), since a lookup's cost shows with the rows it has to pass.
``--before-env`` / ``--after-env`` set a server's environment (a setting on one side only,
e.g. ``MAXCLAW_LEAN_ROUTES=false``); ``--third`` adds a third server taking the same turns.
The database is dropped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from bench import dataset, roundtrip, server
from bench.loop import Samples
from bench.pg import execute_sql, fresh_database

ROOT = Path(__file__).resolve().parent.parent


def _start(url: str, tree: Path, logs: Path, name: str, socket_dir: str | None = None,
           extra_env: dict[str, str] | None = None) -> server.Server:
    env = {"PYTHONPATH": f"{tree / 'src'}{os.pathsep}{ROOT}", **(extra_env or {})}
    if socket_dir:  # the same database over PostgreSQL's Unix socket instead of TCP
        parts = urlsplit(url)
        url = urlunsplit((parts.scheme, f"{parts.username}@", parts.path,
                          f"host={socket_dir}", ""))
    return server.start(url, logs / f"serve-{name}.log", env=env)


@dataclass
class Side:
    """One tree's server, its database and users, and SQL run before each of its slices."""

    url: str
    server: server.Server
    ids: list[roundtrip.Identity]
    setup_sql: str | None = None


def take_turns(sides: dict[str, Side], clients: list[int], rounds: int, seconds: float,
               mode: str, tag: str) -> list[dict[str, Any]]:
    """At each client count the sides take turns ``rounds`` times (fresh threads each turn,
    0.5 s warm-up); each side's slices are merged into its point, printed as it is made."""
    out: list[dict[str, Any]] = []
    for n in clients:
        parts: dict[str, list[Samples]] = {name: [] for name in sides}
        for r in range(rounds):
            for name, side in sides.items():
                if side.setup_sql:
                    roundtrip.run_async(execute_sql(side.url, side.setup_sql))
                stocks = roundtrip.run_async(roundtrip.make_stocks(
                    side.url, side.ids[:n], roundtrip.stock_size(n, seconds + 0.5, 400)))
                got, _ = roundtrip.run_async(roundtrip.http_point(
                    side.url, side.server, side.ids[:n], stocks, f"{tag}{n}{name}{r}", 0.5,
                    seconds, mode == "x"))
                parts[name].append(got)
        for name in sides:
            res = Samples.merge(parts[name]).result(n)
            row = {"tree": name, "clients": n, "rate_per_s": res["rate_per_s"],
                   "p50_ms": res["latency"].get("p50_ms"),
                   "cpu_ms": res.get("cpu_ms_per_round_trip"),
                   "errors": res.get("errors"), "loadavg": os.getloadavg()[0]}
            out.append(row)
            print(json.dumps(row), flush=True)
    return out


def run(url: str, trees: dict[str, Path], clients: list[int], rounds: int, seconds: float,
        mode: str, sockets: dict[str, str | None] | None = None,
        setup: dict[str, str] | None = None,
        envs: dict[str, dict[str, str]] | None = None) -> list[dict[str, Any]]:
    logs = Path(tempfile.mkdtemp(prefix="maxclaw-ab-"))

    async def identities(n: int) -> list[roundtrip.Identity]:
        async with roundtrip.in_process(url) as services:
            return await roundtrip.make_identities(services, f"ab{int(time.time())}", n)

    ids = roundtrip.run_async(identities(max(clients)))
    servers = {name: _start(url, tree, logs, name, (sockets or {}).get(name),
                            (envs or {}).get(name))
               for name, tree in trees.items()}
    sides = {name: Side(url, srv, ids, (setup or {}).get(name))
             for name, srv in servers.items()}
    try:
        return take_turns(sides, clients, rounds, seconds, mode, "ab")
    finally:
        for srv in servers.values():
            srv.stop()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ab_http")
    parser.add_argument("--before", type=Path, default=ROOT)
    parser.add_argument("--after", type=Path, default=ROOT)
    parser.add_argument("--clients", default="1,4,16")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--mode", choices=["x", "c"], default="x")
    parser.add_argument("--after-socket", help="the after server reaches PostgreSQL through "
                        "this Unix socket directory (e.g. /var/run/postgresql) instead of TCP")
    parser.add_argument("--before-sql", type=Path, help="SQL run before each 'before' slice")
    parser.add_argument("--after-sql", type=Path, help="SQL run before each 'after' slice")
    parser.add_argument("--cards", type=int, default=0, help="cards loaded first")
    parser.add_argument("--before-env", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting of the before server (e.g. MAXCLAW_LEAN_ROUTES=false)")
    parser.add_argument("--after-env", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--third", type=Path, help="a third tree, taking turns with the two")
    parser.add_argument("--third-env", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--database-url")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    envs = {name: dict(item.split("=", 1) for item in items) for name, items in
            (("before", args.before_env), ("after", args.after_env), ("third", args.third_env))}
    if (args.before == args.after and envs["before"] == envs["after"]
            and not (args.before_sql or args.after_sql)):
        parser.error("--before names the same tree as --after: give another checkout, "
                     "--before-env/--after-env for a setting, or --before-sql/--after-sql for "
                     "a change in the database")
    for path in (args.before_sql, args.after_sql):
        if path is not None and not path.is_file():
            parser.error(f"no SQL file {path}")
    setup = {name: path.read_text() for name, path in
             (("before", args.before_sql), ("after", args.after_sql)) if path is not None}
    with fresh_database(args.database_url) as url:
        if args.cards:
            seconds = roundtrip.run_async(dataset.load(url, "ab", args.cards, due=False))
            print(f"loaded {args.cards:,} cards in {seconds:.1f} s", flush=True)
        trees = {"before": args.before, "after": args.after}
        if args.third is not None:
            trees["third"] = args.third
        rows = run(url, trees, [int(c) for c in args.clients.split(",")], args.rounds,
                   args.seconds, args.mode, {"after": args.after_socket}, setup, envs)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
