"""The dashboard and the alert rules in deploy/ only name metrics ``/metrics`` exposes (with
the labels they select and group by), and the database gauges report what the database
holds."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import Harness
from tests.ops.test_retention import component, decision, device, outbox, thread, turn

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "maxclaw-dashboard.json"
ALERTS = ROOT / "deploy" / "prometheus" / "maxclaw-alerts.yml"
METRIC = re.compile(r"\bmaxclaw_[a-z0-9_]+")
SELECTOR = re.compile(r"\b(maxclaw_[a-z0-9_]+)\{([^}]*)\}")
GROUPING = re.compile(r"\bby \(([^)]*)\)")
# labels Prometheus adds at scrape time, and the histogram bucket bound
ADDED_LABELS = {"instance", "job", "le"}


def expressions() -> list[str]:
    exprs = [t["expr"] for p in json.loads(DASHBOARD.read_text())["panels"]
             for t in p["targets"]]
    rules = yaml.safe_load(ALERTS.read_text())["groups"][0]["rules"]
    assert rules and exprs
    return exprs + [r["expr"] for r in rules]


def exposed(text: str) -> dict[str, set[str]]:
    """Every sample name a scrape can hold -> the labels of its family (even with no
    sample yet: a labelled counter nobody incremented has only its HELP and TYPE)."""
    names: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"],
                    "summary": ["_sum", "_count", ""]}.get(family.type, [""])
        labels = {k for s in family.samples for k in s.labels}
        for suffix in suffixes:
            names[family.name + suffix] = labels
    return names


def declared_labels(harness: Harness) -> dict[str, set[str]]:
    """Label names each metric is declared with (the registry knows them before any sample)."""
    out: dict[str, set[str]] = {}
    registry: Any = harness.services.metrics.registry
    for collector, names in registry._collector_to_names.items():
        for name in names:
            out[name] = set(getattr(collector, "_labelnames", ()))
    return out


async def test_every_metric_the_dashboard_and_alerts_use_is_in_metrics(harness: Harness) -> None:
    resp = await harness.client.get("/metrics")
    assert resp.status_code == 200
    names = exposed(resp.text)
    labels = declared_labels(harness)
    exprs = expressions()
    used = {m for e in exprs for m in METRIC.findall(e)}
    assert len(used) >= 15
    assert sorted(used - names.keys()) == []
    for expr in exprs:
        for metric, matchers in SELECTOR.findall(expr):
            keys = {m.split("=")[0].strip().rstrip("!~") for m in matchers.split(",") if m}
            assert keys <= labels[metric] | ADDED_LABELS, (expr, keys, labels[metric])
        for grouping in GROUPING.finditer(expr):
            inner = METRIC.search(expr, grouping.end())
            assert inner, expr
            keys = {k.strip() for k in grouping.group(1).split(",")}
            assert keys <= labels[inner.group(0)] | ADDED_LABELS, (expr, keys)


def test_the_dashboard_json_is_what_its_script_writes() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "build_dashboard", ROOT / "deploy" / "grafana" / "build_dashboard.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert DASHBOARD.read_text() == module.render()


def sample(text: str, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    raise AssertionError(f"{name}{labels} not in /metrics")


async def test_database_gauges_report_the_database(harness: Harness) -> None:
    actor = await harness.actor("max")
    uid = actor.user_id
    async with harness.services.db.transaction() as conn:
        due = await component(conn, uid, actor.main_thread_id, "open")
        await conn.execute("UPDATE message_components SET due_at = now() - interval '10 minutes'"
                           " WHERE id = $1", due)
        dev = await device(conn, uid)
        settled = await decision(conn, uid, "settled")
        waiting = await outbox(conn, uid, dev, None, "pending", 0)
        await conn.execute("UPDATE push_outbox SET next_attempt_at = now() - interval '2 minutes'"
                           " WHERE id = $1", waiting)
        await outbox(conn, uid, dev, settled, "dead", 1)
        await outbox(conn, uid, dev, settled, "dead", 1)
        await turn(conn, uid, await thread(conn, uid), "lapsed", 0.001)  # 86 s ago
        await turn(conn, uid, await thread(conn, uid), "lapsed", 1)  # a day ago: not recent
        queued = await turn(conn, uid, await thread(conn, uid), "queued", 0)
        await conn.execute("UPDATE turns SET created_at = now() - interval '30 seconds'"
                           " WHERE id = $1", queued)
    text = (await harness.client.get("/metrics")).text
    assert 600 <= sample(text, "maxclaw_db_sweep_lag_seconds") < 700
    assert sample(text, "maxclaw_db_push_outbox_rows", status="pending") == 1
    assert sample(text, "maxclaw_db_push_outbox_rows", status="dead") == 2
    assert 120 <= sample(text, "maxclaw_db_push_outbox_oldest_due_seconds") < 200
    assert sample(text, "maxclaw_db_turn_lapses_recent") == 1
    assert 30 <= sample(text, "maxclaw_db_turn_queued_oldest_seconds") < 100
    assert sample(text, "maxclaw_db_pool_acquire_seconds_count") > 0
    assert sample(text, "maxclaw_db_pool_connections", state="max") == 10

    # the card leaves 'open' (as a sweep or an answer moves it): the lag reads 0 on the next read
    async with harness.services.db.connection() as conn:
        await conn.execute("UPDATE message_components SET status = 'with-main', due_at = NULL"
                           " WHERE id = $1", due)
    harness.services.ops.gauges._last = float("-inf")
    text = (await harness.client.get("/metrics")).text
    assert sample(text, "maxclaw_db_sweep_lag_seconds") == 0
