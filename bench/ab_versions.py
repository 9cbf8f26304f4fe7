"""Before/after across schema versions: two code trees, each on its own database, same run.

``python -m bench.ab_versions --before <checkout> [--after <checkout>] [--clients 1,16]
[--rounds 3] [--seconds 3] [--mode x|c] [--cards N] [--before-deps DIR] [--database-url URL]
[--out FILE]``

``bench.ab_http`` puts both servers on one database, so it can only compare trees that share
a schema. This one gives each tree a database of its own on the same PostgreSQL, migrated,
loaded (``--cards``) and given its users by that tree's own code (a subprocess with the tree
first on ``PYTHONPATH``), so a checkout from before a round's migrations can be measured
against today's: the question "how much of the database work per round trip did the round
remove" asked on one machine in one run, which absolute figures from different machines
cannot answer. The servers then take turns exactly as in ``bench.ab_http``
(``ab_http.take_turns``: fresh threads each turn, the same HTTP load process, CPU per round
trip by process: each database's backends, each server). Both databases are dropped at the end.

An older tree may need a dependency this checkout no longer declares (e.g. ``apscheduler``
before the sweeps left it): ``pip install --target DIR <package>`` and ``--before-deps DIR``
put it on that tree's path only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import roundtrip, server
from bench.ab_http import Side, take_turns
from bench.pg import BenchDatabase, choose_server

ROOT = Path(__file__).resolve().parent.parent

# Run inside each tree (its own maxclaw and bench first on the path): migrate the empty
# database with that tree's migrations, load its cards (then ANALYZE, in dataset.load), make
# its users; print the users.
SETUP = """
import json, sys
from bench import dataset, roundtrip
from maxclaw.db import migrate
url, tag, count, cards = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
migrate.upgrade(url)
if cards:
    roundtrip.run_async(dataset.load(url, tag, cards, due=False))

async def users():
    async with roundtrip.in_process(url) as services:
        return await roundtrip.make_identities(services, tag, count)

print(json.dumps([vars(i) for i in roundtrip.run_async(users())]))
"""


def tree_path(tree: Path, deps: Path | None) -> str:
    """The tree's sources first, then the extra dependencies it alone needs."""
    return os.pathsep.join(str(p) for p in (tree / "src", tree, deps) if p is not None)


def prepare(url: str, tree: Path, deps: Path | None, tag: str, users: int,
            cards: int) -> list[roundtrip.Identity]:
    """The tree's own migrations, cards and users on its database."""
    env = {**os.environ, "PYTHONPATH": tree_path(tree, deps)}
    proc = subprocess.run([sys.executable, "-c", SETUP, url, tag, str(users), str(cards)],
                          cwd=tree, env=env, capture_output=True, text=True,
                          timeout=1800, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"setting up {tree} failed:\n{proc.stderr[-3000:]}")
    return [roundtrip.Identity(**row) for row in json.loads(proc.stdout.splitlines()[-1])]


def ratios(rows: list[dict[str, Any]]) -> list[str]:
    """after / before per client count: round trips/s and CPU per round trip by process."""
    lines = []
    by = {(r["tree"], r["clients"]): r for r in rows}
    for (tree, n), after in sorted(by.items()):
        before = by.get(("before", n))
        if tree != "after" or before is None:
            continue
        parts = [f"{n} clients: rt/s {before['rate_per_s']:.1f} -> {after['rate_per_s']:.1f} "
                 f"({after['rate_per_s'] / before['rate_per_s']:.2f}x)"]
        for proc in ("postgres", "server", "load", "total"):
            b, a = (before["cpu_ms"] or {}).get(proc), (after["cpu_ms"] or {}).get(proc)
            if b and a is not None:
                parts.append(f"{proc} CPU {b:.2f} -> {a:.2f} ms ({a / b:.2f})")
        lines.append("; ".join(parts))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ab_versions")
    parser.add_argument("--before", type=Path, required=True,
                        help="a checkout of the earlier version (e.g. git worktree add)")
    parser.add_argument("--after", type=Path, default=ROOT)
    parser.add_argument("--clients", default="1,16")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--mode", choices=["x", "c"], default="x")
    # Not 0: on tables that are empty when a statement's plan is cached (a generic plan), the
    # plan is made for empty tables (sequential scans) and kept while the run fills them,
    # until autovacuum's next ANALYZE (its naptime is a minute): measured, the current tree
    # then cost 1.85-1.94x the earlier one's PostgreSQL CPU at one client, against 1.19x on
    # analysed tables
    parser.add_argument("--cards", type=int, default=20_000,
                        help="cards each tree loads (and ANALYZEs) into its database first")
    parser.add_argument("--before-deps", type=Path, metavar="DIR",
                        help="a pip --target directory on the before tree's path only")
    parser.add_argument("--database-url")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    for name, tree in trees.items():
        if not (tree / "src" / "maxclaw").is_dir() or not (tree / "bench").is_dir():
            parser.error(f"--{name} {tree} is not a checkout of this project (no src/maxclaw "
                         "or bench/)")
    if trees["before"] == trees["after"]:
        parser.error("--before and --after name the same tree")
    if args.before_deps is not None and not args.before_deps.is_dir():
        parser.error(f"--before-deps {args.before_deps} is not a directory")
    deps = {"before": args.before_deps, "after": None}
    clients = [int(c) for c in args.clients.split(",")]
    pg = choose_server(args.database_url)
    dbs = {name: BenchDatabase(pg, migrated=False) for name in trees}
    logs = Path(tempfile.mkdtemp(prefix="maxclaw-abv-"))
    servers: dict[str, server.Server] = {}
    try:
        urls = {name: db.create() for name, db in dbs.items()}
        ids = {}
        for name, tree in trees.items():
            print(f"setting up {name} ({tree}): migrations, {args.cards:,} cards, users",
                  file=sys.stderr, flush=True)
            ids[name] = prepare(urls[name], tree, deps[name], f"v{name}", max(clients), args.cards)
        for name, tree in trees.items():
            servers[name] = server.start(urls[name], logs / f"serve-{name}.log",
                                         env={"PYTHONPATH": tree_path(tree, deps[name])})
        print(f"load average {os.getloadavg()}", flush=True)
        sides = {name: Side(urls[name], servers[name], ids[name]) for name in trees}
        rows = take_turns(sides, clients, args.rounds, args.seconds, args.mode, "v")
        print(f"load average {os.getloadavg()}", flush=True)
    finally:
        for srv in servers.values():
            srv.stop()
        for db in dbs.values():
            db.drop()
        pg.stop()
    for line in ratios(rows):
        print(line, flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"trees": {k: str(v) for k, v in trees.items()},
                                        "cards": args.cards, "mode": args.mode,
                                        "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
