"""How big and how long: ``--quick`` (about a minute) and the full run (bounded, ~10 minutes)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Plan:
    name: str
    levels: list[int]  # bulk cards in the database at each level; the last is 10x the first
    concurrency: list[int]  # clients for the round trip at the first level
    growth_concurrency: list[int]  # clients for the round trip at the 10x level
    warmup_s: float  # per mode and point, split over the rounds
    duration_s: float  # measured, per mode and point, split over the rounds
    rounds: int  # a, b and c take turns this many times at each point (drift hits all three)
    due: int  # cards made due for the hand-over sweep, at each level
    sweep_repeats: int  # none-due sweeps timed at each level
    variants: bool  # the floor and service variants that locate the costs
    ws_clients: int  # WebSocket clients for answer → frame
    frame_answers: int  # answers timed for answer → frame
    claim_answers: int  # answers timed for answer → claim
    notes: list[str] = field(default_factory=list)
    push_backlog: int = 5_000  # rows queued at once for the dispatcher's deliveries/s
    push_answers: int = 500  # answers timed for answer → withdraw delivered
    push_rate: float = 100.0  # answers/s offered for answer → withdraw delivered

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


QUICK = Plan(name="quick", levels=[10_000, 100_000], concurrency=[1, 4, 16],
             growth_concurrency=[16], warmup_s=0.6, duration_s=2.0, rounds=2, due=2_000,
             sweep_repeats=50, variants=False, ws_clients=200, frame_answers=100,
             claim_answers=50, push_backlog=2_000, push_answers=200,
             notes=["quick: 10k/100k cards instead of 100k/1M, 2,000 due instead of 10,000, "
                    "2 s per point; verdicts on sizes are indicative only"])
FULL = Plan(name="full", levels=[100_000, 1_000_000], concurrency=[1, 4, 16],
            growth_concurrency=[1, 16], warmup_s=3.0, duration_s=12.0, rounds=3, due=10_000,
            sweep_repeats=200, variants=True, ws_clients=1000, frame_answers=400,
            claim_answers=200)
