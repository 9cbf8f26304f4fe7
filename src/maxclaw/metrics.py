"""Prometheus metrics, one registry per app (tests run several apps in one process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("maxclaw_http_requests_total", "HTTP requests",
                                ["method", "route", "status"], registry=self.registry)
        self.latency = Histogram("maxclaw_http_request_seconds", "HTTP request latency",
                                 ["method", "route"], registry=self.registry,
                                 buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5))
        self.answers = Counter("maxclaw_answers_total", "Component answers", ["via"],
                               registry=self.registry)
        self.cas_conflicts = Counter("maxclaw_cas_conflicts_total",
                                     "Component transitions that lost a race", ["reason"],
                                     registry=self.registry)
        self.sweeps = Counter("maxclaw_sweep_cards_total", "Due cards swept", ["outcome"],
                              registry=self.registry)
        self.pushes = Counter("maxclaw_push_total", "Push deliveries", ["platform", "outcome"],
                              registry=self.registry)
        self.ops = OpsMetrics(self.registry)


class OpsMetrics:
    """What the dashboard and the alert rules read besides the counters above (deploy/).

    The gauges named ``maxclaw_db_*`` describe the whole database, not this process: every
    replica reports the same figure (alerts take ``max``). ``ops.gauges`` refreshes them when
    ``/metrics`` is scraped.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.pool_acquire = Histogram(
            "maxclaw_db_pool_acquire_seconds", "Time spent waiting for a pooled connection",
            registry=registry,
            buckets=(.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5))
        self.pool_size = Gauge("maxclaw_db_pool_connections",
                               "Connections in this process's pool", ["state"],
                               registry=registry)
        self.pruned = Counter("maxclaw_pruned_rows_total", "Rows deleted by retention",
                              ["rule"], registry=registry)
        self.sweep_lag = Gauge(
            "maxclaw_db_sweep_lag_seconds",
            "Age of the oldest due card not yet handed over to Main (0: none)",
            registry=registry)
        self.outbox = Gauge("maxclaw_db_push_outbox_rows", "Push outbox rows by status",
                            ["status"], registry=registry)
        self.outbox_oldest = Gauge(
            "maxclaw_db_push_outbox_oldest_due_seconds",
            "How long the oldest due pending push has waited (0: none)", registry=registry)
        self.turn_lapses = Gauge(
            "maxclaw_db_turn_lapses_recent",
            "Turns whose lease lapsed in the last 15 minutes", registry=registry)
        self.turns_queued_oldest = Gauge(
            "maxclaw_db_turn_queued_oldest_seconds",
            "How long the oldest queued turn has waited for a runtime (0: none)",
            registry=registry)
        self.gauges_age = Gauge(
            "maxclaw_db_gauges_refreshed_timestamp_seconds",
            "When the database gauges were last read (unix time)", registry=registry)
