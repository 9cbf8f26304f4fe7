"""At INFO an operator reads what the service did, not that a timer fired: the scheduler's
per-run lines are gone, and a sweep that moved cards says so in one line with counts."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator

import pytest

from maxclaw.components.sweeper import Sweeper
from maxclaw.logs import LIBRARY_LOGGERS, configure_logging
from tests.cards import CHOICE, new_thread, post_card
from tests.conftest import Harness


@pytest.fixture
def json_logs() -> Iterator[io.StringIO]:
    """The service's own logging set-up (JSON, INFO), its stderr handler writing to a buffer."""
    before = {name: logging.getLogger(name).level for name in ("", *LIBRARY_LOGGERS)}
    configure_logging("INFO", json_output=True)
    buffer = io.StringIO()
    root = logging.getLogger()
    handler = root.handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(buffer)
    yield buffer
    root.handlers[:] = []
    for name, level in before.items():
        logging.getLogger(name).setLevel(level)


def lines(buffer: io.StringIO) -> list[dict[str, object]]:
    """The JSON lines written since the last call (every line must be JSON)."""
    text = buffer.getvalue()
    buffer.seek(0)
    buffer.truncate()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


async def test_the_sweeper_says_what_it_did_and_not_that_it_ran(
        harness: Harness, json_logs: io.StringIO) -> None:
    max_ = await harness.actor("max")
    thread_id = await new_thread(max_.user)
    await post_card(max_.agent, thread_id, CHOICE, main_after_minutes=0)
    sweeper = Sweeper(harness.services.components, interval_s=0.05, batch=100)
    lines(json_logs)  # what the set-up logged is not under test
    await sweeper.start()
    try:
        await asyncio.sleep(0.6)  # ~10 ticks: one moves the card, the rest find nothing
    finally:
        await sweeper.stop()
    logged = lines(json_logs)
    # (a tick that overlaps the previous one is still a warning: that one is worth reading)
    assert [r for r in logged if str(r["logger"]).startswith("apscheduler")
            and r["level"] == "info"] == []
    swept = [r for r in logged if r["msg"] == "swept"]
    assert len(swept) == 1, logged
    assert swept[0]["handed_to_main"] == 1 and swept[0]["level"] == "info"


async def test_library_loggers_are_raised_only_to_warning(
        json_logs: io.StringIO) -> None:
    logging.getLogger("apscheduler.executors.default").info("Running job …")
    logging.getLogger("aiohttp.client").warning("a library warning still gets through")
    logged = lines(json_logs)
    assert [r["msg"] for r in logged] == ["a library warning still gets through"]
