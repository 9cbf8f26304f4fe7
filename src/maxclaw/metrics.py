"""Prometheus metrics, one registry per app (tests run several apps in one process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram


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
