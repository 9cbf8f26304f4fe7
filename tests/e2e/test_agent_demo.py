"""``maxclaw demo`` as a user runs it: one command, nothing else running, and per card the
three time points and the model requests made while the question was open."""

from __future__ import annotations

import re
import subprocess
import sys


def test_demo_runs_end_to_end_and_prints_the_time_points() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "maxclaw.cli", "demo", "--step-delay-s", "0.2",
         "--answer-after-s", "0.4"],
        capture_output=True, text=True, timeout=110)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    cards = out.split("\nCard ")[1:]
    assert len(cards) == 2, out
    for card in cards:
        points = [float(x) for x in re.findall(r"\+\s*([\d.]+) s", card)]
        assert len(points) == 3, card
        posted, arrived, seen = points
        assert posted < arrived <= seen  # tool returned < answer arrived <= model saw it
    early, late = cards
    assert "at the next step boundary of the running turn" in early
    assert "status removed" in early
    assert "in the new turn the answer woke" in late
    assert "status kept as a deprecated alias" in late
    # the late card was open through the whole first turn: three survey steps and the stop
    open_late = int(re.search(r"while the question was open: (\d+)", late).group(1))  # type: ignore[union-attr]
    assert open_late >= 3
    assert "(a blocking ask: 0)" in late
    # the late card's agent changed its plan: it superseded its question and withdrew another
    assert re.search(r"the plan changed, so the agent withdrew card \S+: superseded by card",
                     late), late
    assert 'the agent withdrew card' in late and "release tooling bumps" in late, late
