"""Keep WebSocket tokens out of the logs.

Browsers cannot set headers on a WebSocket, so they pass ``?token=…``; uvicorn logs each
handshake with its path and query string ("WebSocket /v1/ws?token=… [accepted]"). This filter
masks the value before any handler formats the record.
"""

from __future__ import annotations

import logging
import re
from urllib.parse import unquote_plus

# any query parameter; its name is judged after percent-decoding, as the server parses it
# (``?%74oken=…`` is ``token``)
_PARAM = re.compile(r"((?:^|[?&])([^=&?\s\"']{1,64})=)[^&\s\"']+")
SECRET_PARAMS = frozenset({"token", "ticket"})
UVICORN_LOGGER = "uvicorn.error"


def _mask(match: re.Match[str]) -> str:
    name = unquote_plus(unquote_plus(match.group(2))).strip().lower()
    return match.group(1) + "***" if name in SECRET_PARAMS else match.group(0)


def redact(text: str) -> str:
    """``text`` with every ``token=`` (or ``ticket=``) query value replaced by ``***``, however
    the parameter's name is percent-encoded."""
    return _PARAM.sub(_mask, text)


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
