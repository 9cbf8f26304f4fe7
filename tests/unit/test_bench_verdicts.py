"""The benchmark's verdicts against LangGraph and the pgbench anchor use the same run's figures."""

from __future__ import annotations

from typing import Any

from bench.report import beside
from bench.targets import verdicts


def _point(mode: str, clients: int, rate: float) -> dict[str, Any]:
    return {"mode": mode, "clients": clients, "rate_per_s": rate}


def _report(with_langgraph: bool) -> dict[str, Any]:
    points = [_point("a", 1, 400), _point("c", 1, 100), _point("a", 16, 800),
              _point("c", 16, 300)]
    if with_langgraph:
        points += [_point("l", 1, 19), _point("l", 16, 100)]
    return {"levels": [{"round_trip": points}],
            "calibration": {"rate_per_s": {"1": 500, "16": 1000}}}


def _by_name(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["target"]: v for v in verdicts(report)}


def test_langgraph_ratio_from_the_same_run() -> None:
    got = _by_name(_report(with_langgraph=True))
    one = got["HTTP round trips ≥ 5× LangGraph at 1 client(s)"]
    assert one["measured"] == 5.26 and one["holds"] is True
    sixteen = got["HTTP round trips ≥ 5× LangGraph at 16 client(s)"]
    assert sixteen["measured"] == 3.0 and sixteen["holds"] is False
    assert "same run" in sixteen["note"]


def test_without_langgraph_the_anchor_machine_figure_is_used_and_said() -> None:
    got = _by_name(_report(with_langgraph=False))
    one = got["HTTP round trips ≥ 5× LangGraph at 1 client(s)"]
    assert one["measured"] == 100 and one["holds"] is False
    assert "not measured in this run" in one["note"]


def test_share_of_the_pgbench_anchor() -> None:
    got = _by_name(_report(with_langgraph=True))
    assert got["HTTP round trips ≥ 25% of the pgbench anchor at 1 client(s)"]["holds"] is False
    assert got["HTTP round trips ≥ 35% of the pgbench anchor at 16 client(s)"]["measured"] == 0.3


def test_side_by_side_rows() -> None:
    rows = beside(_report(with_langgraph=True))
    assert rows[0] == {"clients": 1, "pgbench": 500, "langgraph": 19, "http": 100,
                       "http_per_langgraph": 5.26, "http_per_pgbench": 0.2}
    assert beside(_report(with_langgraph=False))[1]["langgraph"] is None


def test_a_langgraph_point_with_no_round_trip_is_no_verdict() -> None:
    report = _report(with_langgraph=True)
    report["levels"][0]["round_trip"][-1]["rate_per_s"] = 0.0
    got = _by_name(report)["HTTP round trips ≥ 5× LangGraph at 16 client(s)"]
    assert got["holds"] is None and "no round trip" in got["note"]
