"""The closed loop every round-trip mode shares: N clients, each doing round trips back to back.

Clients start together; the first ``warmup`` seconds are not counted (caches, prepared
statements, connection set-up); round trips that *finish* inside the measured window count
towards the rate, and their latencies towards the percentiles.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from bench.stats import summary_ms

# one round trip; returns (total seconds, seconds of the answer step alone)
RoundTrip = Callable[[], Awaitable[tuple[float, float]]]


@dataclass
class Samples:
    """What one point measured: completions in the window, their latencies, failures."""

    window_s: float
    total: list[float] = field(default_factory=list)
    answer: list[float] = field(default_factory=list)
    errors: int = 0
    first_error: str | None = None
    completed: int = 0  # every round trip finished, warm-up included (for CPU per round trip)
    cpu_ms: dict[str, Any] = field(default_factory=dict)

    def result(self, clients: int) -> dict[str, Any]:
        return {"clients": clients, "round_trips": len(self.total),
                "rate_per_s": round(len(self.total) / self.window_s, 1),
                "window_s": self.window_s, "errors": self.errors,
                "first_error": self.first_error, "latency": summary_ms(self.total),
                "answer_latency": summary_ms(self.answer),
                "cpu_ms_per_round_trip": self.cpu_ms}

    def to_json(self) -> dict[str, Any]:
        return {"window_s": self.window_s, "total": self.total, "answer": self.answer,
                "errors": self.errors, "first_error": self.first_error,
                "completed": self.completed}

    @classmethod
    def merge(cls, parts: list[Samples]) -> Samples:
        """Slices of one mode (interleaved with the other modes) as one point; CPU per round
        trip weighted by the round trips of each slice."""
        out = cls(window_s=sum(p.window_s for p in parts))
        for p in parts:
            out.total += p.total
            out.answer += p.answer
            out.errors += p.errors
            out.first_error = out.first_error or p.first_error
            out.completed += p.completed
        keys = {k for p in parts for k in p.cpu_ms}
        if out.completed:
            out.cpu_ms = {k: round(sum(p.cpu_ms.get(k, 0.0) * p.completed for p in parts)
                                   / out.completed, 3) for k in sorted(keys)}
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Samples:
        return cls(data["window_s"], data["total"], data["answer"], data["errors"],
                   data["first_error"], data["completed"])


async def closed_loop(clients: list[RoundTrip], warmup: float, duration: float) -> Samples:
    """Run every client until the window closes; errors are counted, not raised."""
    start = time.perf_counter()
    window_start, window_end = start + warmup, start + warmup + duration
    samples = Samples(window_s=duration)

    async def client(round_trip: RoundTrip) -> None:
        while time.perf_counter() < window_end:
            try:
                total, answer = await round_trip()
            except Exception as exc:  # a failed round trip is a finding, not a crash
                samples.errors += 1
                samples.first_error = samples.first_error or f"{type(exc).__name__}: {exc}"
                if samples.errors > 100:
                    raise
                continue
            done = time.perf_counter()
            samples.completed += 1
            if window_start <= done <= window_end:
                samples.total.append(total)
                samples.answer.append(answer)

    await asyncio.gather(*(client(rt) for rt in clients))
    return samples
