"""The one periodic-job mechanism (``jobs.PeriodicJob``) that runs the sweeper, the lease lapse,
the pruner and the secret sweeper: one pass at a time, a failed pass retried by the next, and
no pass still running once ``stop`` returns (the pool closes right after)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from maxclaw.errors import Unavailable
from maxclaw.jobs import PeriodicJob


class Probe(PeriodicJob):
    """Counts passes and how many run at once; a pass takes ``pass_s`` and may fail."""

    name = "probe"

    def __init__(self, interval_s: float, *, run_at_start: bool, pass_s: float = 0.0,
                 failures: list[BaseException] | None = None) -> None:
        super().__init__(interval_s, run_at_start=run_at_start)
        self.pass_s = pass_s
        self.failures = list(failures or [])
        self.passes = 0
        self.running = 0
        self.most_at_once = 0
        self.finished = 0

    async def run_once(self) -> None:
        self.passes += 1
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        try:
            if self.failures:
                raise self.failures.pop(0)
            await asyncio.sleep(self.pass_s)
            self.finished += 1
        finally:
            self.running -= 1


async def test_the_first_pass_comes_at_start_or_one_interval_later() -> None:
    now, later = Probe(10, run_at_start=True), Probe(10, run_at_start=False)
    await now.start()
    await later.start()
    await asyncio.sleep(0.1)
    await now.stop()
    await later.stop()
    assert (now.passes, later.passes) == (1, 0)


async def test_a_slow_pass_delays_the_next_and_never_overlaps_it() -> None:
    job = Probe(0.01, run_at_start=True, pass_s=0.1)
    loop = asyncio.get_running_loop()
    began = loop.time()
    await job.start()
    await asyncio.sleep(0.35)
    await job.stop()
    elapsed = loop.time() - began
    assert job.most_at_once == 1
    # a round is a pass and then the interval (0.11 s), not a pass every 0.01 s
    assert 2 <= job.passes <= elapsed / 0.11 + 1


async def test_a_failed_pass_is_logged_and_the_next_one_runs(
        caplog: pytest.LogCaptureFixture) -> None:
    job = Probe(0.01, run_at_start=True,
                failures=[Unavailable("The database is unavailable; retry shortly."),
                          RuntimeError("a bug")])
    with caplog.at_level(logging.WARNING, logger="maxclaw.jobs"):
        await job.start()
        for _ in range(200):
            if job.finished:
                break
            await asyncio.sleep(0.01)
        await job.stop()
    assert job.finished >= 1 and job.passes >= 3
    failed = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "maxclaw.jobs"]
    assert failed[:2] == [("WARNING", "periodic job failed; the next pass retries"),
                          ("ERROR", "periodic job crashed; the next pass retries")]


async def test_stop_returns_only_when_no_pass_runs_and_none_follows() -> None:
    job = Probe(0.01, run_at_start=True, pass_s=10)
    await job.start()
    await asyncio.sleep(0.05)
    assert job.running == 1
    await job.stop()
    assert job.running == 0 and job.finished == 0
    passes = job.passes
    await asyncio.sleep(0.05)
    assert job.passes == passes
