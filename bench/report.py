"""Printing: progress lines while running, then the tables and the targets' verdicts."""

from __future__ import annotations

import sys
import time
from typing import Any

MODE_NAMES = {"a": "(a) direct SQL (floor)", "b": "(b) in-process service",
              "c": "(c) HTTP API", "l": "(l) LangGraph interrupt/resume",
              "x": "(x) HTTP, post + execute: true",
              "a_no_notify": "(a') floor, no NOTIFY",
              "a_merged": "(a'') floor, merged statements",
              "a_notify_after_commit": "(a*) floor, NOTIFY after COMMIT",
              "c_again": "(c) HTTP API, again",
              "c_patched": "(c') HTTP, async deps, no telemetry"}
_T0 = time.monotonic()


def say(message: str) -> None:
    """One progress line, prefixed with the time since the run started."""
    elapsed = int(time.monotonic() - _T0)
    print(f"[{elapsed // 60:02d}:{elapsed % 60:02d}] {message}", file=sys.stderr, flush=True)


def point_line(p: dict[str, Any], floor_rate: float | None) -> str:
    lat, ans = p["latency"], p["answer_latency"]
    ratio = f"{p['rate_per_s'] / floor_rate:5.2f}" if floor_rate else "    -"
    errors = f"  errors {p['errors']}" if p["errors"] else ""
    reused = f"  reused threads {p['reused_threads']}" if p.get("reused_threads") else ""
    return (f"{p['clients']:>3}  {MODE_NAMES.get(p['mode'], p['mode']):<31} "
            f"{p['rate_per_s']:>8.1f} {lat.get('p50_ms', float('nan')):>9.2f} "
            f"{lat.get('p99_ms', float('nan')):>9.2f} {ans.get('p50_ms', float('nan')):>9.2f} "
            f"{ans.get('p99_ms', float('nan')):>9.2f}   {ratio}{errors}{reused}")


HEADER = (f"{'n':>3}  {'mode':<31} {'rt/s':>8} {'p50 ms':>9} {'p99 ms':>9} {'ans p50':>9} "
          f"{'ans p99':>9}   /floor")


def floor_rate(points: list[dict[str, Any]], clients: int) -> float | None:
    for p in points:
        if p["mode"] == "a" and p["clients"] == clients:
            return float(p["rate_per_s"])
    return None


def beside(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Per client count at the first level: the pgbench anchor, LangGraph, MaxClaw over HTTP
    (round trips/s, same run) and the ratios the targets judge."""
    levels = report.get("levels") or []
    if not levels:
        return []
    anchor = (report.get("calibration") or {}).get("rate_per_s") or {}
    rates = {(p["mode"], p["clients"]): p["rate_per_s"] for p in levels[0]["round_trip"]}
    rows = []
    for n in sorted({p["clients"] for p in levels[0]["round_trip"]}):
        # the agent's round trip over HTTP: two requests (x) when the server supports it
        c = rates.get(("x", n)) or rates.get(("c", n))
        lg, pgb = rates.get(("l", n)), anchor.get(str(n))
        rows.append({"clients": n, "pgbench": pgb, "langgraph": lg, "http": c,
                     "http_per_langgraph": round(c / lg, 2) if c and lg else None,
                     "http_per_pgbench": round(c / pgb, 3) if c and pgb else None})
    return rows


def print_report(report: dict[str, Any]) -> None:
    out = sys.stdout
    m = report["machine"]
    pg = m["postgres"]
    print(f"\nMaxClaw benchmark ({report['plan']['name']}), {report['finished_at']}", file=out)
    print(f"machine: {m['nproc']} cores ({m['cpu']}), load avg at start "
          f"{m['loadavg_at_start'][0]:.2f}; PostgreSQL {pg['server_version']} "
          f"({report['server_source']}), fsync={pg['fsync']}, "
          f"synchronous_commit={pg['synchronous_commit']}", file=out)
    cal = report.get("calibration", {})
    if cal.get("rate_per_s"):
        got = ", ".join(f"{n}: {r}/s" for n, r in cal["rate_per_s"].items())
        print(f"the issue's anchor script (pgbench) here and now: {got} "
              f"(on the quiet anchor machine: 1: 770/s, 4: 2060/s, 16: 1515/s)", file=out)
    elif cal:
        print(f"anchor calibration: {cal.get('status')}", file=out)
    stm = report.get("statements", {})
    if stm:
        s, f = stm["service"], stm["floor"]
        print(f"statements per round trip: service {s['round_trip']} (post {s['post']}, execute "
              f"{s['execute']}, answer {s['answer']}; {s['kinds']}), floor {f['round_trip']}",
              file=out)
    for level in report["levels"]:
        print(f"\nRound trip (post a card, answer it) with {level['cards']:,} cards in the "
              f"database; latencies in ms; 'ans' = the answer step alone", file=out)
        print(HEADER, file=out)
        points = level["round_trip"] + level.get("variants", [])
        for p in points:
            print(point_line(p, floor_rate(level["round_trip"], p["clients"])), file=out)
        sweep = level.get("sweep", {})
        if sweep.get("none_due"):
            nd = sweep["none_due"]
            print(f"sweep, nothing due among {nd['cards']:,} cards: sweep_due() p50 "
                  f"{nd['sweep_due_call']['p50_ms']} ms, p99 {nd['sweep_due_call']['p99_ms']} ms;"
                  f" claim query {nd['claim_query']['execution_ms']} ms on the server "
                  f"(index {', '.join(nd['claim_query']['indexes']) or 'NONE'})", file=out)
        if sweep.get("due"):
            d = sweep["due"]
            print(f"sweep, {d['due']:,} due: all handed to Main in {d['seconds']} s "
                  f"({d['cards_per_s']}/s); claim of a 500 batch "
                  f"{d['claim_500']['execution_ms']} ms on the server", file=out)
        if sweep.get("due_set_wise_prototype"):
            d = sweep["due_set_wise_prototype"]
            print(f"sweep, {d['due']:,} due, set-wise prototype (bench/sweep_batch.py): "
                  f"{d['seconds']} s ({d['cards_per_s']}/s)", file=out)
    print(file=out)
    for name, label in (("frames", "answer → frame"),
                        ("frames_poll_only", "answer → frame, no NOTIFY, 50 ms poll"),
                        ("claim", "answer → claim")):
        item = report.get(name) or {}
        if item.get("latency"):
            lat = item["latency"]
            extra = (f"; server RSS {item['server_rss_mb']} MB with {item['clients']:,} sockets, "
                     f"{item['missing_frames']} frames missing"
                     if name.startswith("frames") else "")
            print(f"{label}: p50 {lat['p50_ms']} ms, p99 {lat['p99_ms']} ms (n={lat['n']}){extra}",
                  file=out)
        elif name in report:
            print(f"{label}: {item.get('status', 'not measured')}", file=out)
    rows = beside(report)
    if rows:
        lg = report.get("langgraph") or {}
        stack = next((p.get("server_stack") for p in report["levels"][0]["round_trip"]
                      if p.get("server_stack")), None)
        if stack:
            print(f"\nserver process: uvloop {'loaded' if stack.get('uvloop') else 'NOT loaded'}"
                  f", httptools {'loaded' if stack.get('httptools') else 'NOT loaded'}",
                  file=out)
        print(f"\nSide by side, round trips/s (LangGraph: {lg.get('status', '-')})", file=out)
        print(f"{'n':>3} {'pgbench anchor':>15} {'LangGraph':>10} {'MaxClaw HTTP':>13} "
              f"{'HTTP/LangGraph':>15} {'HTTP/pgbench':>13}", file=out)
        for r in rows:
            print(f"{r['clients']:>3} {r['pgbench'] or '-':>15} {r['langgraph'] or '-':>10} "
                  f"{r['http'] or '-':>13} {r['http_per_langgraph'] or '-':>15} "
                  f"{r['http_per_pgbench'] or '-':>13}", file=out)
    if report.get("push"):
        from bench.push import line as push_line

        print(push_line(report["push"]), file=out)
    print("\nTargets", file=out)
    for v in report["verdicts"]:
        mark = {True: "HOLDS", False: "MISSES", None: "  -   "}[v["holds"]]
        note = f"  ({v['note']})" if v["note"] else ""
        print(f"  [{mark}] {v['target']}: {v['measured']} (target {v['threshold']}){note}",
              file=out)
