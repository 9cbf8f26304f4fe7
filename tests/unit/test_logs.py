"""Structured logs carry only whitelisted fields: a body or an answer never reaches the output."""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Iterator

import pytest

from maxclaw.logs import SAFE_FIELDS, JsonFormatter, TextFormatter, configure_logging

SECRET = "hunter2-the-deploy-token"


def record(**extra: object) -> logging.LogRecord:
    rec = logging.LogRecord("maxclaw.test", logging.INFO, __file__, 1, "answer posted", None, None)
    rec.__dict__.update(extra)
    return rec


def test_json_formatter_keeps_safe_fields_and_drops_the_rest() -> None:
    line = JsonFormatter().format(record(component_id="call_7:q1", status=200, body=SECRET,
                                         answer={"text": SECRET}, text=SECRET))
    out = json.loads(line)
    assert out["msg"] == "answer posted"
    assert out["level"] == "info"
    assert out["logger"] == "maxclaw.test"
    assert out["ts"].endswith("+00:00")
    assert out["component_id"] == "call_7:q1"
    assert out["status"] == 200
    assert not {"body", "answer", "text"} & set(out)
    assert SECRET not in line


def test_text_formatter_drops_the_same_fields() -> None:
    line = TextFormatter().format(record(thread_id="t-1", body=SECRET))
    assert line.startswith("I maxclaw.test: answer posted")
    assert "thread_id=t-1" in line
    assert SECRET not in line


def test_no_whitelisted_field_names_content() -> None:
    # the whitelist is the guarantee; a field that names content would break it
    assert not {"body", "answer", "answer_text", "text", "content", "secret", "token"} & SAFE_FIELDS


@pytest.fixture
def root_logger() -> Iterator[logging.Logger]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield root
    root.handlers[:] = handlers
    root.setLevel(level)


def test_configure_logging_writes_one_json_object_per_line(
        root_logger: logging.Logger, monkeypatch: pytest.MonkeyPatch) -> None:
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    configure_logging("INFO", json_output=None)  # a StringIO is not a terminal: JSON
    logging.getLogger("maxclaw.x").info("posted", extra={"decision_id": 12, "body": SECRET})
    logging.getLogger("maxclaw.x").debug("below the level")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1
    assert json.loads(lines[0])["decision_id"] == 12
    assert SECRET not in stream.getvalue()


def test_configure_logging_text_on_request(root_logger: logging.Logger,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    configure_logging("debug", json_output=False)
    logging.getLogger("maxclaw.x").debug("hello", extra={"count": 3})
    assert stream.getvalue() == "D maxclaw.x: hello  count=3\n"


def test_exception_messages_are_withheld_but_frames_kept() -> None:
    import logging
    import sys

    from maxclaw.logs import JsonFormatter, TextFormatter

    secret = "-".join(["planted", "value", "123"])  # not a literal: source lines are shown
    try:
        try:
            raise ValueError(f"{secret} in a driver message")
        except ValueError as inner:
            raise RuntimeError(f"wrapped {secret}") from inner
    except RuntimeError:
        record = logging.LogRecord("t", logging.ERROR, __file__, 1, "boom", None, sys.exc_info())
    for formatter in (JsonFormatter(), TextFormatter()):
        out = formatter.format(record)
        assert secret not in out
        assert "builtins.ValueError" in out and "builtins.RuntimeError" in out
        assert "test_exception_messages_are_withheld_but_frames_kept" in out
