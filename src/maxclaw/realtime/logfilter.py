"""Keep WebSocket tokens out of the logs.

Browsers cannot set headers on a WebSocket, so they pass ``?token=…``; uvicorn logs each
handshake with its path and query string ("WebSocket /v1/ws?token=… [accepted]"). This filter
masks the value before any handler formats the record.
"""

from __future__ import annotations

import logging
import re

_TOKEN = re.compile(r"((?:^|[?&])token=)[^&\s\"']+")
UVICORN_LOGGER = "uvicorn.error"


def redact(text: str) -> str:
    """``text`` with every ``token=`` query value replaced by ``***``."""
    return _TOKEN.sub(r"\1***", text)


class RedactTokens(logging.Filter):
    """Masks ``token=`` query values in a record's message and string arguments."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(redact(a) if isinstance(a, str) else a for a in record.args)
        return True


def install() -> None:
    """Attach the filter to uvicorn's logger once per process."""
    logger = logging.getLogger(UVICORN_LOGGER)
    if not any(isinstance(f, RedactTokens) for f in logger.filters):
        logger.addFilter(RedactTokens())
