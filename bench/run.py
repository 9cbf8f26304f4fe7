"""``python -m bench [--quick]``: the whole suite, one command.

It picks a PostgreSQL (``--database-url``; else the anchors' server at 127.0.0.1:5432 if it
answers; else an embedded one), creates a fresh database, runs every item at each data level,
prints the tables and the targets' verdicts, writes ``bench/results/latest.json`` and the charts
(``docs/img/bench-*.png``), and drops the database.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import (
    calibrate,
    counting,
    cpu,
    dataset,
    floor,
    langgraph_rt,
    live,
    mcp_rt,
    push,
    roundtrip,
    server,
    sweep,
    variants,
)
from bench.loop import Samples
from bench.pg import BenchDatabase, choose_server, machine, postgres_settings
from bench.plan import FULL, QUICK, Plan
from bench.report import point_line, print_report, say
from bench.targets import ANCHORS, verdicts
from maxclaw.db.database import connect

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"

# More items of the suite, run after answer → claim, in order: (report key, what to say,
# ``async fn(url, plan, log_dir) -> dict``). A module adds its line here; the dict it returns
# is stored under its key, and a ``"verdicts"`` list in it (rows as ``bench.targets`` makes
# them) is added to the targets.
Item = Callable[[str, Plan, Path], Awaitable[dict[str, Any]]]
ITEMS: list[tuple[str, str, Item]] = [
    ("push", "push: a backlog to a local webhook, then answer → withdraw delivered", push.item),
]
ITEMS.append(("mcp", "ask → answer → get_answers over MCP (/mcp) beside REST",
              mcp_rt.mcp_item))


async def record_round_trip(url: str) -> tuple[floor.Script, dict[str, Any]]:
    """One warm round trip through the service objects, recorded: the floor's script, and the
    statements per step (SQL, BEGIN/COMMIT, pool resets) for the report. The post carries
    ``"execute": true`` (the card posted in the post's transaction) when the code measured
    supports it; then the execute step is empty."""
    recorder = floor.Recorder()
    with counting.installed() as log:
        async with roundtrip.in_process(url, pool_max=2) as services:
            ident = (await roundtrip.make_identities(services, "rec", 1))[0]
            stock = (await roundtrip.make_stocks(url, [ident], 2))[0]
            agent, user = ident.principal("agent"), ident.principal("user")
            in_post = False
            for attempt in range(2):  # the first warms prepared statements and type codecs
                thread, call_id = stock.take(), f"rec{attempt}"
                steps: dict[str, list[str]] = {}
                recorder.steps = {p: [] for p in floor.PHASES}
                with recorder.hooked():
                    for phase in floor.PHASES:
                        recorder.phase = phase
                        with log.record() as queries:
                            if phase == "post":
                                got = await services.agent_messages.post(
                                    agent, thread, roundtrip.assistant_row(call_id, True))
                                in_post = bool(got.get("results"))
                            elif phase == "execute":
                                if not in_post:
                                    await services.tools.execute(agent, thread, call_id)
                            else:
                                await services.components.answer(user, f"{call_id}:q1",
                                                                  ["keep"], None, "card")
                            await counting.drain()
                        steps[phase] = list(queries)
                    recorder.phase = None
    script = floor.Script(recorder.steps, ident.user_id, thread, call_id)
    script.execute_in_post = in_post
    every = [q for step in steps.values() for q in step]
    report = {"execute_in_post": in_post,
              "service": {**{k: len(v) for k, v in steps.items()}, "round_trip": len(every),
                          "kinds": counting.StatementLog.kinds(every),
                          "answer_statements": steps["answer"]},
              "floor": {**script.counts(), "round_trip": sum(script.counts().values())},
              "http_extra": "each request authenticates its token (cached for 30 s)"}
    return script, report


def _result(samples: Any, mode: str, clients: int, reused: int) -> dict[str, Any]:
    return {"mode": mode, **samples.result(clients), "reused_threads": reused}


async def round_trips(url: str, plan: Plan, level: int, clients_list: list[int],
                      log_dir: Path, script: floor.Script,
                      lang_url: str | None = None) -> list[dict[str, Any]]:
    """Modes a, b, c (and l, LangGraph, when ``lang_url`` is given) side by side at each
    concurrency (interleaved, so drift hits all of them)."""
    points: list[dict[str, Any]] = []
    async with roundtrip.in_process(url) as services:
        identities = await roundtrip.make_identities(services, f"L{level}",
                                                     max(clients_list))
        for n in clients_list:
            points += await _interleaved(url, plan, level, n, identities[:n], services,
                                         script, log_dir, lang_url)
    return points


async def _interleaved(url: str, plan: Plan, level: int, n: int,
                       ids: list[roundtrip.Identity], services: Any, script: floor.Script,
                       log_dir: Path, lang_url: str | None = None) -> list[dict[str, Any]]:
    """a, b, c (and l) at ``n`` clients, taking turns ``plan.rounds`` times, each turn on
    fresh threads; the slices of each mode are merged into its point. The server stays up
    across the turns (idle while a, b and l run: its hub gets their NOTIFY hints, finds no
    socket for those users and reads nothing); so does LangGraph's pool."""
    warm, dur = plan.warmup_s / plan.rounds, plan.duration_s / plan.rounds
    in_post = bool(script.execute_in_post)
    parts: dict[str, list[Samples]] = {"a": [], "b": [], "c": [], **({"x": []} if in_post else {})}
    lang: langgraph_rt.LangGraph | None = None
    if lang_url is not None:
        parts["l"] = []
        lang = await langgraph_rt.LangGraph(lang_url, n).__aenter__()
    reused = dict.fromkeys(parts, 0)
    srv = await asyncio.to_thread(server.start, url, log_dir / f"serve-L{level}-{n}.log")
    try:
        for r in range(plan.rounds):
            say(f"level {level}: {n} client(s), turn {r + 1}/{plan.rounds}: "
                f"{', '.join(parts)} …")
            tag = f"L{level}n{n}r{r}"
            rate = parts["a"][-1].result(n)["rate_per_s"] if parts["a"] else None
            for mode in parts:
                if mode == "l":
                    assert lang is not None and lang_url is not None
                    parts[mode].append(await _lang_point(lang, lang_url, tag + "l", warm, dur))
                    continue
                stocks = await roundtrip.make_stocks(
                    url, ids, roundtrip.stock_size(n, warm + dur, rate))
                if mode == "a":
                    got = await roundtrip.floor_point(url, ids, stocks, tag + mode, warm, dur,
                                                      roundtrip.ReplayFloor(script))
                    reused[mode] += sum(s.reused for s in stocks)
                elif mode == "b":
                    got = await roundtrip.service_point(url, services, ids, stocks, tag + mode,
                                                        warm, dur, in_post)
                    reused[mode] += sum(s.reused for s in stocks)
                else:
                    got, again = await roundtrip.http_point(url, srv, ids, stocks, tag + mode,
                                                            warm, dur, mode == "x")
                    reused[mode] += again
                parts[mode].append(got)
        rss, stack = srv.rss_mb(), srv.stack()
    finally:
        srv.stop()
        if lang is not None:
            await lang.__aexit__(None, None, None)
    points = [_result(Samples.merge(parts[m]), m, n, reused[m]) for m in parts]
    points[2]["server_rss_mb"], points[2]["server_stack"] = rss, stack
    base = points[0]["rate_per_s"]
    for p in points:
        say("  " + point_line(p, base))
    return points


async def _lang_point(lang: langgraph_rt.LangGraph, lang_url: str, tag: str, warm: float,
                      dur: float) -> Samples:
    """(l): LangGraph in this process; CPU of this process and of its database's backends."""
    return await roundtrip.metered(lang_url, {"python": [cpu.own_pid()]},
                                   lambda: lang.point(tag, warm, dur))


async def run_level(url: str, plan: Plan, level: int, loaded: int, log_dir: Path,
                    script: floor.Script, lang_url: str | None = None) -> dict[str, Any]:
    cards = plan.levels[level]
    say(f"level {level}: loading {cards - loaded:,} cards (to {cards:,}) …")
    load_s = await dataset.load(url, f"L{level}b", cards - loaded, due=False,
                                progress=lambda n: say(f"  {loaded + n:,} cards"))
    out: dict[str, Any] = {"cards": cards, "load_s": round(load_s, 1)}
    clients = plan.concurrency if level == 0 else plan.growth_concurrency
    out["round_trip"] = await round_trips(url, plan, level, clients, log_dir, script,
                                          lang_url if level == 0 else None)
    if plan.variants and level == 0:
        out["variants"] = await variants.run(url, plan, level, [1, 16], script, log_dir)
    say(f"level {level}: sweep with nothing due …")
    conn = await connect(url)
    try:
        async with roundtrip.in_process(url) as services:
            none = await sweep.none_due(services, conn, plan.sweep_repeats)
            say(f"  sweep_due() p50 {none['sweep_due_call']['p50_ms']} ms among "
                f"{none['cards']:,} cards")
            say(f"level {level}: {plan.due:,} cards due, sweeping …")
            due = await sweep.with_due(services, url, conn, f"L{level}d", plan.due)
            say(f"  handed over in {due['seconds']} s")
    finally:
        await conn.close()
    out["sweep"] = {"none_due": none, "due": due}
    return out


async def run(plan: Plan, url: str, source: str, log_dir: Path,
              only_live: bool = False, lang_url: str | None = None,
              lang_status: str | None = None) -> dict[str, Any]:
    started = datetime.now(UTC)
    report: dict[str, Any] = {
        "suite": "maxclaw-bench", "format": 1, "plan": plan.to_json(),
        "command": "python -m bench" + (" --quick" if plan.name == "quick" else ""),
        "started_at": started.isoformat(timespec="seconds"), "server_source": source,
        "machine": machine(await postgres_settings(url), url), "anchors": ANCHORS}
    say("recording one round trip through the service (the floor replays it) …")
    script, report["statements"] = await record_round_trip(url)
    report["levels"] = []
    report["langgraph"] = ({"status": "measured (mode l)", "versions": langgraph_rt.versions()}
                           if lang_url else {"status": lang_status or "not measured"})
    if not only_live:
        say("the issue's anchor script under pgbench, on this machine now …")
        report["calibration"] = await calibrate.run(url, plan.concurrency,
                                                    5.0 if plan.name == "full" else 2.0)
        say(f"  {report['calibration'].get('rate_per_s') or report['calibration']['status']}")
    loaded = 0
    for level in range(0 if only_live else len(plan.levels)):
        report["levels"].append(await run_level(url, plan, level, loaded, log_dir, script,
                                                lang_url))
        loaded = plan.levels[level] + plan.due * (level + 1) * (2 if plan.variants else 1)
    say(f"answer → frame: {plan.ws_clients:,} WebSocket clients, {plan.frame_answers} answers …")
    poster = roundtrip.ReplayFloor(script).post
    report["frames"] = await live.answer_to_frame(url, log_dir, poster, plan.ws_clients,
                                                  plan.frame_answers)
    say(f"  p50 {report['frames']['latency'].get('p50_ms')} ms, "
        f"p99 {report['frames']['latency'].get('p99_ms')} ms, "
        f"server RSS {report['frames']['server_rss_mb']} MB")
    if plan.variants:
        say("answer → frame without NOTIFY (the hub polls every 50 ms) …")
        report["frames_poll_only"] = await live.answer_to_frame(
            url, log_dir, poster, plan.ws_clients, plan.frame_answers, tag="wsp", poll_only_s=0.05)
        say(f"  p50 {report['frames_poll_only']['latency'].get('p50_ms')} ms, "
            f"p99 {report['frames_poll_only']['latency'].get('p99_ms')} ms")
    say(f"answer → claim: {plan.claim_answers} answers …")
    report["claim"] = await live.answer_to_claim(url, log_dir, poster, plan.claim_answers)
    say(f"  p50 {report['claim']['latency'].get('p50_ms')} ms, "
        f"p99 {report['claim']['latency'].get('p99_ms')} ms")
    for key, what, item in ITEMS:
        say(f"{what} …")
        try:
            report[key] = await item(url, plan, log_dir)
        except Exception as exc:  # one item's failure must not lose the rest of the report
            say(f"  {key} failed: {type(exc).__name__}: {exc}")
            report[key] = {"status": f"failed: {type(exc).__name__}: {exc}"}
    finished = datetime.now(UTC)
    report["finished_at"] = finished.isoformat(timespec="seconds")
    report["duration_s"] = round((finished - started).total_seconds(), 1)
    report["verdicts"] = verdicts(report) + [
        v for key, _, _ in ITEMS for v in (report.get(key) or {}).get("verdicts", [])]
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, about a minute")
    parser.add_argument("--database-url", help="a PostgreSQL server to use (a fresh database "
                        "is created on it and dropped); default: 127.0.0.1:5432, else embedded")
    parser.add_argument("--out", type=Path, help="the JSON report (default: "
                        "bench/results/latest.json for a full run, quick.json for --quick)")
    parser.add_argument("--no-charts", action="store_true", help="do not redraw docs/img/")
    parser.add_argument("--only-live", action="store_true", help="only answer → frame and "
                        "answer → claim (no bulk data, no round-trip table)")
    parser.add_argument("--label", default="", help="a note stored in the report, e.g. which "
                        "code was measured (with PYTHONPATH=<snapshot>/src)")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    out = args.out or RESULTS / ("live.json" if args.only_live else
                                 "latest.json" if plan.name == "full" else "quick.json")
    pg = choose_server(args.database_url)
    db = BenchDatabase(pg)
    say(f"PostgreSQL: {pg.source}; creating database {db.name} …")
    url = db.create()
    # LangGraph's saver in a database of its own on the same server
    lang_status = None if args.only_live else langgraph_rt.available()
    lang_db = BenchDatabase(pg, name=db.name + "_langgraph", migrated=False)
    lang_url = lang_db.create() if lang_status is None and not args.only_live else None
    if lang_status:
        say(f"LangGraph: {lang_status}; its comparison is left out")
    log_dir = Path(tempfile.mkdtemp(prefix="maxclaw-bench-logs-"))
    try:
        report = roundtrip.run_async(run(plan, url, pg.source, log_dir, args.only_live,
                                         lang_url, lang_status))
        report["label"] = args.label
    finally:
        db.drop()
        if lang_url:
            lang_db.drop()
        pg.stop()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    print_report(report)
    print(f"\nreport: {out}  (server logs: {log_dir})")
    if not args.no_charts and not args.only_live:
        from bench import chart

        # a full run draws the committed charts; a quick one draws next to its report
        where = ROOT / "docs" / "img" if plan.name == "full" else RESULTS
        for path in chart.draw(report, where, prefix="bench-" if plan.name == "full"
                               else "quick-"):
            print(f"chart: {path}")
    if any(p.get("errors") for level in report["levels"] for p in level["round_trip"]):
        sys.exit(1)
