"""``maxclaw push-worker``: the dispatcher alone, without the API, until Ctrl-C or SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

from maxclaw.push.dispatcher import Dispatcher

log = logging.getLogger("maxclaw.push")


async def run_worker(dispatcher: Dispatcher) -> int:
    """Run the dispatcher until a signal; returns 0 after a clean stop."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    await dispatcher.start()
    log.info("push worker running; Ctrl-C stops it")
    try:
        await stop.wait()
    finally:
        await dispatcher.stop()
        log.info("push worker stopped")
    return 0
