"""``bench.ci``'s verdicts: ratios over the floor measured in the same run, against the committed
baseline with 25 % tolerance; a ratio the run lacks (its item failed) fails."""

from __future__ import annotations

import json

from bench.ci import BASELINE, RATIOS, compare, ratios
from bench.loop import Samples


def _samples(**cpu: float) -> Samples:
    s = Samples(window_s=1.0)
    s.cpu_ms = cpu
    return s


def test_ratios_are_over_the_floor_of_the_same_run() -> None:
    points = {"floor": _samples(postgres=0.5, python=0.5, total=1.0),
              "service": _samples(postgres=1.5, python=2.5, total=4.0),
              "http": _samples(postgres=2.0, server=3.0, load=1.0, total=6.0)}
    assert ratios(points) == {"service_total": 4.0, "service_postgres": 1.5,
                              "http_server_and_postgres": 5.0, "http_postgres": 2.0}
    # a slower machine slows the floor too: the same ratios
    slow = {m: _samples(**{k: v * 3 for k, v in s.cpu_ms.items()}) for m, s in points.items()}
    assert ratios(slow) == ratios(points)


def test_more_than_25_percent_worse_fails_and_a_missing_ratio_fails() -> None:
    rows = compare({"a": 1.25, "b": 1.26}, {"a": 1.0, "b": 1.0, "c": 1.0})
    assert [(r["ratio"], r["passed"]) for r in rows] == [("a", True), ("b", False),
                                                         ("c", False)]
    assert ratios({"service": _samples(total=1.0)}) == {}  # no floor, no ratio


def test_the_committed_baseline_names_every_ratio() -> None:
    assert set(json.loads(BASELINE.read_text())["ratios"]) == set(RATIOS)
