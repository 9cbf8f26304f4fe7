"""A consequence of a move is written in one place, ``components/effects.py``: the jobs that
move cards (answers, hand-off, withdraw, sweeps, the shared move) call it and never write a
message, a carrier or a push themselves — the inline copies this replaced had drifted."""

from __future__ import annotations

import ast
from pathlib import Path

from maxclaw.components.effects import EFFECTS
from maxclaw.components.machine import Effect

COMPONENTS = Path(__file__).resolve().parents[2] / "src" / "maxclaw" / "components"
MOVERS = ("answers.py", "handoff.py", "withdraw.py", "sweeps.py", "moves.py")
# where consequences are written: the carriers, the timeline, the push outbox
CONSEQUENCE_MODULES = {"maxclaw.decisions.carriers", "maxclaw.timeline.store",
                       "maxclaw.push.outbox", "maxclaw.push.store"}


def imported(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def test_every_effect_has_its_one_function() -> None:
    assert set(EFFECTS) == set(Effect)
    assert len(set(EFFECTS.values())) == len(Effect)


def test_the_jobs_that_move_cards_write_no_consequence_themselves() -> None:
    wrong = {name: sorted(imported(COMPONENTS / name) & CONSEQUENCE_MODULES)
             for name in MOVERS}
    assert {k: v for k, v in wrong.items() if v} == {}


def test_the_check_reads_the_effects_module() -> None:
    # guards the test itself: the effects module does import what the movers may not
    assert {"maxclaw.decisions.carriers", "maxclaw.timeline.store"} <= imported(
        COMPONENTS / "effects.py")
