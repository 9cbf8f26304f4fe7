"""Variants that locate the costs (full run, first level), each next to its baseline:

- ``a_no_notify``: the floor with no ``pg_notify`` at all (the rev trigger skipped by
  ``maxclaw.notify = off``; the turns trigger, which notifies unconditionally, is swapped for
  a copy that honours the same setting, in this throwaway database only, then restored);
- ``a_merged``: the floor with every write of a step merged into one statement
  (``bench.merged``): 5 statements and no BEGIN/COMMIT per round trip;
- ``a_notify_after_commit``: no NOTIFY inside the transactions (as ``a_no_notify``), and the
  same hints sent right after each COMMIT in a statement of their own. A transaction that
  notifies holds a cluster-wide lock from its pre-commit until its commit record is flushed;
  a notify-only transaction writes no WAL, so it holds that lock for microseconds.

(A patched-server variant — the ``Services`` dependency async, FastAPI telemetry off — was
measured here until 38c3f22 made the real server so; its figures are in the report of the
run before, ``bench/results/latest.json`` of 88b4a14.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench import floor, merged, roundtrip
from bench.pg import execute_sql
from bench.plan import Plan
from bench.report import point_line, say
from maxclaw.db.database import connect

TURN_FUNCTION = "maxclaw_turn_changed()"
# the hints the triggers would have sent, once per transaction, after its commit
HINT_AFTER_COMMIT = ("SELECT pg_notify('maxclaw_rev', json_build_object('u', $1::text)::text),"
                     " pg_notify('maxclaw_turn', $1::text)")


async def _silence_turn_notify(url: str) -> str:
    """Make the turns trigger honour ``maxclaw.notify``; returns the original definition."""
    conn = await connect(url)
    try:
        original = str(await conn.fetchval(
            "SELECT pg_get_functiondef($1::regprocedure)", TURN_FUNCTION))
        quiet = original.replace(
            "IF NEW.status = 'queued' THEN",
            "IF NEW.status = 'queued' AND coalesce(current_setting('maxclaw.notify', true), '')"
            " <> 'off' THEN")
        if quiet == original:
            raise RuntimeError("the turns trigger changed; update bench.variants")
        await conn.execute(quiet)
        return original
    finally:
        await conn.close()


async def run(url: str, plan: Plan, level: int, clients_list: list[int],
              script: floor.Script, log_dir: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    seconds = plan.warmup_s + plan.duration_s
    async with roundtrip.in_process(url) as services:
        identities = await roundtrip.make_identities(services, f"V{level}", max(clients_list))
        for n in clients_list:
            ids = identities[:n]
            for mode in ("a_no_notify", "a_notify_after_commit", "a_merged"):
                stocks = await roundtrip.make_stocks(url, ids, roundtrip.stock_size(n, seconds))
                tag = f"V{level}{mode[2:6]}{n}"
                say(f"variant {mode}, {n} client(s) …")
                if mode in ("a_no_notify", "a_notify_after_commit"):
                    after = HINT_AFTER_COMMIT if mode == "a_notify_after_commit" else None
                    original = await _silence_turn_notify(url)
                    try:
                        samples = await roundtrip.floor_point(
                            url, ids, stocks, tag, plan.warmup_s, plan.duration_s,
                            roundtrip.ReplayFloor(script, after),
                            setup="SET maxclaw.notify = 'off'")
                    finally:
                        await execute_sql(url, original)
                else:
                    samples = await roundtrip.floor_point(url, ids, stocks, tag, plan.warmup_s,
                                                          plan.duration_s, impl=merged)
                out.append({"mode": mode, **samples.result(n),
                            "reused_threads": sum(s.reused for s in stocks)})
                say("  " + point_line(out[-1], None))
    return out


async def _notify_interleaved(url: str, clients: list[int], rounds: int, seconds: float,
                              ) -> list[dict[str, Any]]:
    """(a), (a') and (a*) taking turns ``rounds`` times at each client count (fresh threads
    each turn), the slices merged per mode: whether sending the hints after the commit pays,
    in one run."""
    from bench.loop import Samples
    from bench.run import record_round_trip

    script, _ = await record_round_trip(url)
    out: list[dict[str, Any]] = []
    warm = 0.5
    async with roundtrip.in_process(url) as services:
        identities = await roundtrip.make_identities(services, "VN", max(clients))
    for n in clients:
        ids = identities[:n]
        parts: dict[str, list[Samples]] = {m: [] for m in (
            "a", "a_no_notify", "a_notify_after_commit")}
        for r in range(rounds):
            for mode in parts:
                stocks = await roundtrip.make_stocks(url, ids,
                                                     roundtrip.stock_size(n, warm + seconds))
                tag = f"VN{mode[2:6]}{n}r{r}"
                if mode == "a":
                    parts[mode].append(await roundtrip.floor_point(
                        url, ids, stocks, tag, warm, seconds, roundtrip.ReplayFloor(script)))
                    continue
                after = HINT_AFTER_COMMIT if mode == "a_notify_after_commit" else None
                original = await _silence_turn_notify(url)
                try:
                    parts[mode].append(await roundtrip.floor_point(
                        url, ids, stocks, tag, warm, seconds,
                        roundtrip.ReplayFloor(script, after),
                        setup="SET maxclaw.notify = 'off'"))
                finally:
                    await execute_sql(url, original)
        base = None
        for mode, slices in parts.items():
            point = {"mode": mode, **Samples.merge(slices).result(n)}
            base = base or point["rate_per_s"]
            out.append(point)
            say("  " + point_line(point, base))
    return out


def main() -> None:
    """``python -m bench.variants [--clients 1,4,16] [--rounds 3] [--seconds 2]``: the floor
    with the hints inside the statements (a), with none (a'), and after each commit (a*)."""
    import argparse
    import json

    from bench.pg import fresh_database

    parser = argparse.ArgumentParser(prog="python -m bench.variants")
    parser.add_argument("--clients", default="1,4,16")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--database-url")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    with fresh_database(args.database_url) as url:
        points = roundtrip.run_async(_notify_interleaved(
            url, [int(c) for c in args.clients.split(",")], args.rounds, args.seconds))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(points, indent=1) + "\n")


if __name__ == "__main__":
    main()
