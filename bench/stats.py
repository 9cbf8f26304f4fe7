"""Percentiles and the compact latency summaries the report and the charts share."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

QUANTILES = [i / 100 for i in range(0, 100)] + [0.995, 0.999, 1.0]


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) by linear interpolation; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summary_ms(values_s: Sequence[float]) -> dict[str, Any]:
    """p50/p90/p99/max in milliseconds plus the quantile curve (for the CDF charts)."""
    ordered = sorted(values_s)
    if not ordered:
        return {"n": 0}

    def q(x: float) -> float:
        return round(percentile(ordered, x) * 1000, 3)

    return {"n": len(ordered), "p50_ms": q(0.5), "p90_ms": q(0.9), "p99_ms": q(0.99),
            "max_ms": q(1.0), "mean_ms": round(sum(ordered) / len(ordered) * 1000, 3),
            "quantiles_ms": [q(x) for x in QUANTILES]}
