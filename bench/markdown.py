"""Markdown tables of a report, for docs/benchmarks.md: ``python -m bench.markdown [report]``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from bench.report import MODE_NAMES, beside, floor_rate


def _row(cells: list[Any]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _ms(value: Any) -> str:
    return "-" if value is None else f"{float(value):.1f}"


def round_trip_table(level: dict[str, Any]) -> list[str]:
    lines = [_row(["clients", "mode", "round trips/s", "p50 ms", "p99 ms", "answer p50 ms",
                   "answer p99 ms", "/ floor", "CPU ms/rt PostgreSQL",
                   "CPU ms/rt Python (a, b: bench; c: server + load)", "CPU ms/rt total"]),
             _row(["---:", "---", "---:", "---:", "---:", "---:", "---:", "---:", "---:",
                   "---:", "---:"])]
    for p in level["round_trip"] + level.get("variants", []):
        base = floor_rate(level["round_trip"], p["clients"])
        cpu = p.get("cpu_ms_per_round_trip") or {}
        python = cpu.get("python", cpu.get("server", 0.0)) + cpu.get("load", 0.0)
        lines.append(_row([
            p["clients"], MODE_NAMES.get(p["mode"], p["mode"]), p["rate_per_s"],
            _ms(p["latency"].get("p50_ms")), _ms(p["latency"].get("p99_ms")),
            _ms(p["answer_latency"].get("p50_ms")), _ms(p["answer_latency"].get("p99_ms")),
            f"{p['rate_per_s'] / base:.2f}" if base else "-", _ms(cpu.get("postgres")),
            _ms(python) if cpu else "-", _ms(cpu.get("total"))]))
    return lines


def render(report: dict[str, Any]) -> str:
    m, pg = report["machine"], report["machine"]["postgres"]
    out = [f"Run: `{report['command']}` ({report['plan']['name']}), {report['started_at']} → "
           f"{report['finished_at']} ({report['duration_s']:.0f} s). "
           f"{report.get('label') or ''}",
           "",
           f"Machine: {m['nproc']} cores ({m['cpu']}), load average {m['loadavg_at_start'][0]:.1f}"
           f" at the start (shared with other engineers' test runs); PostgreSQL "
           f"{pg['server_version'].split()[0]} ({report['server_source']}: "
           f"`{m['database'].rsplit('/', 1)[0]}/…`, a fresh database, dropped afterwards), "
           f"fsync={pg['fsync']}, synchronous_commit={pg['synchronous_commit']}, "
           f"shared_buffers={pg['shared_buffers']}; Python {m['python']}.", ""]
    cal = report.get("calibration", {})
    if cal.get("rate_per_s"):
        r = cal["rate_per_s"]
        out += [f"The issue's anchor script under pgbench in the same run: {r.get('1')} / "
                f"{r.get('4')} / {r.get('16')} round trips/s at 1 / 4 / 16 clients (the quiet "
                "anchor machine: 770 / 2,060 / 1,515).", ""]
    st = report.get("statements", {})
    if st:
        s = st["service"]
        out += [f"Statements per round trip through the service: {s['round_trip']} (post "
                f"{s['post']}, execute {s['execute']}, answer {s['answer']}; "
                f"{s['kinds']['sql']} SQL, {s['kinds']['begin_commit']} BEGIN/COMMIT, "
                f"{s['kinds']['pool_reset']} pool resets). The floor replays the same "
                f"{st['floor']['round_trip']}.", ""]
    for level in report["levels"]:
        out += [f"**Round trip with {level['cards']:,} cards in the database** "
                f"(bulk load {level['load_s']} s)", ""]
        out += round_trip_table(level)
        sweep = level.get("sweep", {})
        out.append("")
        if sweep.get("none_due"):
            nd = sweep["none_due"]
            out.append(f"- Sweep, nothing due among {nd['cards']:,} cards: `sweep_due()` p50 "
                       f"{nd['sweep_due_call']['p50_ms']} ms, p99 "
                       f"{nd['sweep_due_call']['p99_ms']} ms; the claim query "
                       f"{nd['claim_query']['execution_ms']} ms on the server "
                       f"(`{', '.join(nd['claim_query']['indexes'])}`).")
        if sweep.get("due"):
            d = sweep["due"]
            out.append(f"- Sweep, {d['due']:,} due: all handed to Main in {d['seconds']} s "
                       f"({d['cards_per_s']}/s), one hand-off message each; claiming a "
                       f"500-card batch {d['claim_500']['execution_ms']} ms on the server.")
        if sweep.get("due_set_wise_prototype"):
            d = sweep["due_set_wise_prototype"]
            out.append(f"- Same, set-wise prototype (`bench/sweep_batch.py`): {d['seconds']} s "
                       f"({d['cards_per_s']}/s).")
        out.append("")
    for key, label in (("frames", "Answer → frame"),
                       ("frames_poll_only", "Answer → frame without NOTIFY (hub polls 50 ms)"),
                       ("claim", "Answer → claim")):
        item = report.get(key) or {}
        if item.get("latency"):
            lat = item["latency"]
            extra = ""
            if key.startswith("frames"):
                extra = (f"; {item['clients']:,} sockets, {item['answers']} answers at "
                         f"{item['rate_per_s']}/s, {item['missing_frames']} frames missing; "
                         f"server RSS {item['server_rss_mb_before']} MB idle, "
                         f"{item['server_rss_mb']} MB with the sockets, "
                         f"{item['server_rss_mb_after']} MB after")
                hub = item.get("hub") or {}
                if hub.get("mean_batch_ms") is not None:
                    extra += (f"; the hub ran {hub['maxclaw_realtime_batch_seconds_count']:.0f}"
                              f" catch-up batches (mean {hub['mean_batch_ms']} ms) for "
                              f"{hub.get('maxclaw_realtime_hints_total', 0):.0f} hints")
            else:
                extra = (f"; {item['answers']} answers; from the answer's request: p50 "
                         f"{item['from_request']['p50_ms']} ms, p99 "
                         f"{item['from_request']['p99_ms']} ms")
            out.append(f"- {label}: p50 {lat['p50_ms']} ms, p99 {lat['p99_ms']} ms{extra}.")
    rows = beside(report)
    if rows:
        lg = report.get("langgraph") or {}
        versions = ", ".join(f"{k} {v}" for k, v in (lg.get("versions") or {}).items())
        out += ["", f"Side by side in this run, round trips/s (LangGraph: "
                f"{lg.get('status', '-')}{'; ' + versions if versions else ''}):", "",
                _row(["clients", "pgbench anchor script", "LangGraph interrupt + resume",
                      "MaxClaw HTTP", "HTTP / LangGraph", "HTTP / pgbench"]),
                _row(["---:", "---:", "---:", "---:", "---:", "---:"])]
        out += [_row([r["clients"], r["pgbench"] or "-", r["langgraph"] or "-", r["http"] or "-",
                      r["http_per_langgraph"] or "-", r["http_per_pgbench"] or "-"])
                for r in rows]
    out += ["", _row(["target", "measured", "threshold", "verdict"]),
            _row(["---", "---:", "---", "---"])]
    for v in report["verdicts"]:
        verdict = {True: "holds", False: "**misses**", None: "-"}[v["holds"]]
        note = f" ({v['note']})" if v["note"] else ""
        out.append(_row([v["target"] + note, v["measured"], v["threshold"], verdict]))
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    path = Path(sys.argv[1] if len(sys.argv) > 1 else "bench/results/latest.json")
    print(render(json.loads(path.read_text())))
