"""``bench.pgss --compare``: medians per side, and statements matched across runs."""

from __future__ import annotations

from typing import Any

from bench.pgss import TOTALS, compare


def _statement(query: str, exec_ms: float, *, plan_ms: float = 0.0, calls: float = 1.0,
               toplevel: bool = True) -> dict[str, Any]:
    return {"query": query, "toplevel": toplevel, "exec_ms_per_round_trip": exec_ms,
            "plan_ms_per_round_trip": plan_ms, "calls_per_round_trip": calls}


def _run(total: float, *statements: dict[str, Any]) -> dict[str, Any]:
    mode = dict.fromkeys(TOTALS, total)
    mode["statements"] = list(statements)
    return {"modes": {"m": mode}}


def test_totals_are_medians_of_each_side() -> None:
    base = [_run(5.0), _run(4.0), _run(9.0)]
    lever = [_run(3.0), _run(8.0), _run(3.5)]
    totals = compare(base, lever)["m"]["totals"]
    assert totals["backend_cpu_ms_per_round_trip"] == {"base": 5.0, "lever": 3.5}
    assert set(totals) == set(TOTALS)


def test_a_statement_is_read_across_runs_and_the_largest_move_comes_first() -> None:
    base = [_run(1, _statement("UPDATE a", 0.30), _statement("SELECT f()", 0.25,
                                                             toplevel=False)),
            _run(1, _statement("UPDATE a", 0.32), _statement("SELECT f()", 0.27,
                                                             toplevel=False))]
    lever = [_run(1, _statement("UPDATE a", 0.31), _statement("SELECT f()", 0.11,
                                                              toplevel=False)),
             _run(1, _statement("UPDATE a", 0.30), _statement("SELECT f()", 0.10,
                                                              toplevel=False))]
    rows = compare(base, lever)["m"]["statements"]
    assert rows[0]["query"] == "(nested) SELECT f()"
    assert rows[0]["base_exec_ms_per_round_trip"] == 0.26
    assert rows[0]["lever_exec_ms_per_round_trip"] == 0.105
    assert rows[0]["delta_ms"] == -0.155
    assert rows[1]["query"] == "UPDATE a" and abs(rows[1]["delta_ms"]) < 0.01


def test_planning_counts_and_a_statement_missing_from_a_run_counts_as_zero() -> None:
    base = [_run(1, _statement("SELECT p", 0.01, plan_ms=0.12)),
            _run(1, _statement("SELECT p", 0.01, plan_ms=0.14)),
            _run(1, _statement("SELECT p", 0.01, plan_ms=0.13))]
    # the lever ran it less: below bench.pgss's cut (calls in half the round trips) in two
    # of the three runs, so absent from their statements
    lever = [_run(1, _statement("SELECT p", 0.01)), _run(1), _run(1)]
    [row] = compare(base, lever)["m"]["statements"]
    assert row["base_plan_ms_per_round_trip"] == 0.13
    assert row["lever_exec_ms_per_round_trip"] == 0.0
    assert row["delta_ms"] == -0.14


def test_statements_whose_text_agrees_are_summed_within_a_run() -> None:
    base = [_run(1, _statement("SELECT pg_notify(x)", 0.05, calls=6),
                 _statement("SELECT pg_notify(x)", 0.03, calls=3))]
    lever = [_run(1, _statement("SELECT pg_notify(x)", 0.05, calls=6))]
    [row] = compare(base, lever)["m"]["statements"]
    assert row["base_calls_per_round_trip"] == 9
    assert row["base_exec_ms_per_round_trip"] == 0.08
    assert row["delta_ms"] == -0.03
