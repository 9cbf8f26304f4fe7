"""The figures the reliability suite prints (what ``docs/reliability.md`` quotes).

Tests add to named counters with ``record("crash", trials=1, answers_fired=312)``; the
``pytest_terminal_summary`` hook of this folder's conftest (and of ``tests/property``) prints one
line per section at the end of the run, e.g.::

    RELIABILITY crash: answers_fired=1560 invariant_violations=0 trials=5

The counters live in this process; run the suite without xdist (``-p no:xdist``) to get totals
printed. Under xdist (``make test``), set ``MAXCLAW_RELIABILITY_FIGURES=<file>``: every record is
also appended there as a JSON line, and ``python -m tests.reliability.figures <file>`` sums them.
"""

from __future__ import annotations

import json
import os
import sys
from collections import defaultdict
from typing import Any

FIGURES: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
_printed = False


def scale() -> int:
    """``MAXCLAW_RELIABILITY_SCALE`` (default 1): multiplies the sizes of the long tests."""
    return max(1, int(os.environ.get("MAXCLAW_RELIABILITY_SCALE", "1")))


def record(section: str, **counts: int) -> None:
    """Add ``counts`` to the section's counters."""
    for key, value in counts.items():
        FIGURES[section][key] += int(value)
    path = os.environ.get("MAXCLAW_RELIABILITY_FIGURES")
    if path:
        with open(path, "a", encoding="utf-8") as out:  # one short line: appends don't interleave
            out.write(json.dumps({"section": section, "counts": counts}) + "\n")


def summary_lines() -> list[str]:
    return [f"RELIABILITY {section}: " + " ".join(f"{k}={v}" for k, v in sorted(c.items()))
            for section, c in sorted(FIGURES.items())]


def print_summary(terminalreporter: Any) -> None:
    """Print the figures once per run (both conftests call this)."""
    global _printed
    if _printed or not FIGURES:
        return
    _printed = True
    terminalreporter.section("reliability figures")
    for line in summary_lines():
        terminalreporter.write_line(line)


def main(path: str) -> None:
    """Sum a figures file written under xdist and print the summary lines."""
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            entry = json.loads(line)
            for key, value in entry["counts"].items():
                FIGURES[entry["section"]][key] += int(value)
    print("\n".join(summary_lines()))


if __name__ == "__main__":
    main(sys.argv[1])
