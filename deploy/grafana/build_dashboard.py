"""Writes maxclaw-dashboard.json next to this file (run it after editing PANELS).

    .venv/bin/python deploy/grafana/build_dashboard.py

Import the JSON into Grafana (Dashboards → Import) and pick the Prometheus data source that
scrapes the replicas. tests/ops/test_observability.py checks the committed JSON is what this
script writes and that every maxclaw_* metric it names is in /metrics.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ANSWER = 'route="/v1/components/{component_id}/answer"'

# (title, unit, [(legend, expr)], description)
PANELS: list[tuple[str, str, list[tuple[str, str]], str]] = [
    ("Answer latency", "s", [
        ("p50", f"histogram_quantile(0.5, sum by (le) (rate("
                f"maxclaw_http_request_seconds_bucket{{{ANSWER}}}[5m])))"),
        ("p99", f"histogram_quantile(0.99, sum by (le) (rate("
                f"maxclaw_http_request_seconds_bucket{{{ANSWER}}}[5m])))"),
    ], "POST /v1/components/{id}/answer, all replicas"),
    ("Answers and requests", "reqps", [
        ("answers {{via}}", "sum by (via) (rate(maxclaw_answers_total[5m]))"),
        ("5xx", 'sum(rate(maxclaw_http_requests_total{status=~"5.."}[5m]))'),
    ], "Answers by surface; server errors"),
    ("CAS conflicts", "ops", [
        ("{{reason}}", "sum by (reason) (rate(maxclaw_cas_conflicts_total[5m]))"),
    ], "Transitions that lost a race (a second answer, a revoke against an answer)"),
    ("Sweep lag", "s", [
        ("oldest due card not handed over", "max(maxclaw_db_sweep_lag_seconds)"),
    ], "0 while the sweeper keeps up; grows when no replica sweeps"),
    ("Swept cards", "ops", [
        ("{{outcome}}", "sum by (outcome) (rate(maxclaw_sweep_cards_total[5m]))"),
    ], "Due cards handed to Main or kept open with a carrier"),
    ("Push outbox", "short", [
        ("{{status}}", "max by (status) (maxclaw_db_push_outbox_rows)"),
    ], "Rows by status (sent rows are not counted; dead rows until retention)"),
    ("Push outbox: oldest due", "s", [
        ("oldest due pending push", "max(maxclaw_db_push_outbox_oldest_due_seconds)"),
    ], "How long the oldest due push has waited for a dispatcher"),
    ("Push outcomes", "ops", [
        ("{{platform}} {{outcome}}",
         "sum by (platform, outcome) (rate(maxclaw_push_total[5m]))"),
    ], "Deliveries per platform: sent, retry, dead, device_gone"),
    ("Realtime batch time", "s", [
        ("p99 {{instance}}", "histogram_quantile(0.99, sum by (le, instance) (rate("
                             "maxclaw_realtime_batch_seconds_bucket[5m])))"),
    ], "One live catch-up batch of the WebSocket hub"),
    ("Realtime sockets and frames", "short", [
        ("sockets {{instance}}", "maxclaw_realtime_subscriptions"),
        ("frames/s {{phase}}", "sum by (phase) (rate(maxclaw_realtime_frames_total[5m]))"),
        ("listener reconnects", "sum(increase(maxclaw_realtime_listener_connects_total[15m]))"),
    ], "Subscribed sockets per replica, frames sent, LISTEN reconnects"),
    ("Turns", "short", [
        ("lease lapses (15 min)", "max(maxclaw_db_turn_lapses_recent)"),
        ("oldest queued turn (s)", "max(maxclaw_db_turn_queued_oldest_seconds)"),
    ], "Runtimes dying mid-turn; turns waiting for a runtime"),
    ("DB pool waits", "s", [
        ("p99 {{instance}}", "histogram_quantile(0.99, sum by (le, instance) (rate("
                             "maxclaw_db_pool_acquire_seconds_bucket[5m])))"),
    ], "Time a request waits for a pooled connection"),
    ("DB pool connections", "short", [
        ("{{instance}} {{state}}", "maxclaw_db_pool_connections"),
    ], "Open, idle and maximum connections per replica"),
    ("Retention", "short", [
        ("{{rule}}", "sum by (rule) (increase(maxclaw_pruned_rows_total[1d]))"),
    ], "Rows pruned per day, per rule"),
]


def dashboard() -> dict[str, Any]:
    panels = []
    for i, (title, unit, targets, description) in enumerate(PANELS):
        panels.append({
            "id": i + 1,
            "type": "timeseries",
            "title": title,
            "description": description,
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "gridPos": {"h": 8, "w": 12, "x": (i % 2) * 12, "y": (i // 2) * 8},
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
            "targets": [{"refId": chr(ord("A") + j), "expr": expr, "legendFormat": legend,
                         "datasource": {"type": "prometheus", "uid": "${datasource}"}}
                        for j, (legend, expr) in enumerate(targets)],
        })
    return {
        "title": "MaxClaw",
        "uid": "maxclaw-ops",
        "tags": ["maxclaw"],
        "timezone": "utc",
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": [{
            "name": "datasource", "label": "Prometheus", "type": "datasource",
            "query": "prometheus", "current": {}, "hide": 0,
        }]},
        "panels": panels,
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


if __name__ == "__main__":
    (Path(__file__).resolve().parent / "maxclaw-dashboard.json").write_text(render())
