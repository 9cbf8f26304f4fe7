"""The Performance issue's anchors and targets, and the verdict of a report against them.

Targets are ratios measured side by side in one run (the machines are shared and noisy);
absolute times are reported and judged, but read them with the machine's load in mind.
"""

from __future__ import annotations

from typing import Any

# Measured on a quiet 2-core machine, PostgreSQL 15, fsync on (the Performance issue).
ANCHORS: dict[str, object] = {
    "pgbench_minimal_round_trip_per_s": {"1": 770, "4": 2060, "16": 1515},
    "pgbench_minimal_round_trip_no_notify_16": 2930,
    "python_psycopg_minimal_round_trip_per_s": {"1": 445, "4": 830, "16": 940},
    "langgraph_interrupt_resume_per_s": {"1": 107, "4": 125, "16": 121},
    "sweep_claim_none_due_ms_1m": 0.07,
    "sweep_claim_500_batch_ms_1m": 0.5,
}


def _point(level: dict[str, Any], mode: str, clients: int) -> dict[str, Any] | None:
    for p in level.get("round_trip", []):
        if p["mode"] == mode and p["clients"] == clients:
            return dict(p)
    return None


def _http(level: dict[str, Any], clients: int) -> dict[str, Any] | None:
    """The agent's round trip over HTTP: two requests (x, the post carrying ``"execute":
    true``) when the server measured supports it, else three (c)."""
    return _point(level, "x", clients) or _point(level, "c", clients)


def _ratio(level: dict[str, Any], mode: str, clients: int) -> float | None:
    a, x = _point(level, "a", clients), _point(level, mode, clients)
    if not a or not x or not a["rate_per_s"]:
        return None
    return round(float(x["rate_per_s"]) / float(a["rate_per_s"]), 3)


def _target(name: str, value: Any, threshold: str, holds: bool | None,
            note: str = "") -> dict[str, Any]:
    return {"target": name, "measured": value, "threshold": threshold, "holds": holds,
            "note": note}


def verdicts(report: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per target of the issue; ``holds`` is None when the item was not measured."""
    out: list[dict[str, Any]] = []
    levels = report.get("levels", [])
    base = levels[0] if levels else {}
    http_mode = "x" if _point(base, "x", 16) else "c"
    c16 = _ratio(base, http_mode, 16)
    out.append(_target("HTTP round trips ≥ 35% of the direct-SQL floor at 16 clients", c16,
                       f"{http_mode}/a ≥ 0.35", None if c16 is None else c16 >= 0.35))
    anchor = (report.get("calibration") or {}).get("rate_per_s") or {}
    lang: dict[str, int] = ANCHORS["langgraph_interrupt_resume_per_s"]  # type: ignore[assignment]
    for n in (1, 4, 16):
        c, lg = _http(base, n), _point(base, "l", n)
        if c is None:
            continue
        if lg is not None and not lg["rate_per_s"]:
            out.append(_target(f"HTTP round trips ≥ 5× LangGraph at {n} client(s)", None,
                               f"{c['mode']}/l ≥ 5", None, "LangGraph completed no round trip "
                               "in the measured window of this run"))
        elif lg is not None:
            x = round(float(c["rate_per_s"]) / float(lg["rate_per_s"]), 2)
            out.append(_target(f"HTTP round trips ≥ 5× LangGraph at {n} client(s)", x,
                               f"{c['mode']}/l ≥ 5", x >= 5, f"same run: {c['rate_per_s']} against "
                               f"LangGraph's {lg['rate_per_s']}/s"))
        else:
            need = 5 * lang[str(n)]
            out.append(_target(f"HTTP round trips ≥ 5× LangGraph at {n} client(s)",
                               c["rate_per_s"], f"≥ {need}/s", c["rate_per_s"] >= need,
                               "LangGraph not measured in this run: its figure is from the "
                               "quiet anchor machine"))
    for n, share in ((1, 0.25), (16, 0.35)):
        c, pgb = _http(base, n), anchor.get(str(n))
        if c is not None and pgb:
            x = round(float(c["rate_per_s"]) / float(pgb), 3)
            out.append(_target(f"HTTP round trips ≥ {share:.0%} of the pgbench anchor at {n} "
                               "client(s)", x, f"{c['mode']}/pgbench ≥ {share}", x >= share,
                               f"same run: {c['rate_per_s']} against {pgb}/s"))
    for n in (1, 4, 16):
        b = _ratio(base, "b", n)
        if b is not None:
            out.append(_target(f"in-process ComponentService ≥ 70% of the floor, {n} client(s)",
                               b, "b/a ≥ 0.70", b >= 0.70))
    frames = report.get("frames") or {}
    if frames.get("latency"):
        lat = frames["latency"]
        out.append(_target("answer → frame p50 ≤ 10 ms", lat["p50_ms"], "≤ 10 ms",
                           lat["p50_ms"] <= 10, f"{frames.get('clients')} WebSocket clients"))
        out.append(_target("answer → frame p99 ≤ 50 ms", lat["p99_ms"], "≤ 50 ms",
                           lat["p99_ms"] <= 50))
        rss = frames.get("server_rss_mb")
        out.append(_target("server RSS ≤ 250 MB with the clients connected", rss, "≤ 250 MB",
                           None if rss is None else rss <= 250))
    else:
        out.append(_target("answer → frame p50 ≤ 10 ms, p99 ≤ 50 ms, RSS ≤ 250 MB", None, "",
                           None, frames.get("status", "not measured")))
    claim = report.get("claim") or {}
    if claim.get("latency"):
        out.append(_target("answer → claim p99 ≤ 50 ms", claim["latency"]["p99_ms"], "≤ 50 ms",
                           claim["latency"]["p99_ms"] <= 50))
    else:
        out.append(_target("answer → claim p99 ≤ 50 ms", None, "", None,
                           claim.get("status", "not measured")))
    if levels:
        big = levels[-1]
        sweep = big.get("sweep", {})
        none = sweep.get("none_due")
        if none:
            ms = none["sweep_due_call"]["p50_ms"]
            out.append(_target(f"sweep with nothing due ≤ 5 ms among {none['cards']:,} cards",
                               ms, "p50 ≤ 5 ms", ms <= 5,
                               "" if none["cards"] >= 1_000_000 else "fewer than 1,000,000 cards"))
        due = sweep.get("due")
        if due:
            out.append(_target(f"{due['due']:,} due cards handed over in ≤ 10 s",
                               due["seconds"], "≤ 10 s", due["seconds"] <= 10,
                               "" if due["due"] >= 10_000 else "fewer than 10,000 due"))
    stmts = report.get("statements", {}).get("service", {})
    if stmts:
        sent = stmts.get("answer_statements", [])
        sql = sum(1 for q in sent if not q.upper().startswith(("BEGIN", "COMMIT", "ROLLBACK")))
        out.append(_target("statements per answer (asserted in tests/integration/"
                           "test_query_plans.py)", f"{len(sent)} ({sql} SQL + BEGIN/COMMIT)",
                           "exact count in the test", None, "see the test for the verdict"))
    return out
