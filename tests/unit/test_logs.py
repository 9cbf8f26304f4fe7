"""Structured logs carry every field a call passes; a field named like content or a credential,
and a credential-shaped value, never reach the output."""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Iterator

import pytest

from maxclaw.logs import REDACTED, JsonFormatter, TextFormatter, configure_logging

SECRET = "hunter2-the-deploy-token"


def record(**extra: object) -> logging.LogRecord:
    rec = logging.LogRecord("maxclaw.test", logging.INFO, __file__, 1, "answer posted", None, None)
    rec.__dict__.update(extra)
    return rec


def test_json_formatter_keeps_every_field_and_redacts_content_by_name() -> None:
    line = JsonFormatter().format(record(component_id="call_7:q1", status=200, body=SECRET,
                                         answer={"text": SECRET}, text=SECRET))
    out = json.loads(line)
    assert out["msg"] == "answer posted"
    assert out["level"] == "info"
    assert out["logger"] == "maxclaw.test"
    assert out["ts"].endswith("+00:00")
    assert out["component_id"] == "call_7:q1"
    assert out["status"] == 200
    assert out["body"] == out["answer"] == out["text"] == REDACTED
    assert SECRET not in line


def test_a_field_no_list_knows_is_logged() -> None:
    """The pruner's row counts, the dispatcher's outbox ids, a sweep's counts: whatever a call
    passes reaches the output, in both formats."""
    fields = {"rows": {"messages": 12, "turns": 3}, "outbox_ids": [4, 5],
              "unwatched": 2, "a_field_added_tomorrow": "value-42"}
    out = json.loads(JsonFormatter().format(record(**fields)))
    assert {k: out[k] for k in fields} == fields
    text = TextFormatter().format(record(**fields))
    assert "a_field_added_tomorrow=value-42" in text and "unwatched=2" in text
    assert "outbox_ids=[4, 5]" in text


def test_text_formatter_redacts_the_same_fields() -> None:
    line = TextFormatter().format(record(thread_id="t-1", body=SECRET))
    assert line.startswith("I maxclaw.test: answer posted")
    assert "thread_id=t-1" in line
    assert SECRET not in line


SECRET_HOLDERS = ["body", "answer", "answer_text", "text", "content", "arguments", "secret",
                  "token", "action_token", "Authorization", "password", "display",
                  "source_meta", "messages", "tool_calls", "ticket", "webhook_secret"]
CREDENTIALS = ["mc_u_" + "A" * 43, "mc_a_" + "b-_" * 14, "mcpa_" + "Z" * 43,
               "mc_k_" + "k" * 43]


@pytest.mark.parametrize("formatter", [JsonFormatter(), TextFormatter()])
def test_no_secret_value_reaches_the_log(formatter: logging.Formatter) -> None:
    """Under every name a secret answer or a credential travels by, at any depth, and as any
    credential-shaped value under a harmless name, in the message too."""
    for name in SECRET_HOLDERS:
        nested = {"payload": {name: SECRET}, "items": [{name: SECRET}]}
        line = formatter.format(record(**{name: SECRET}))
        assert SECRET not in line, (name, line)
        line = formatter.format(record(**{name: {"inner": SECRET, "list": [SECRET]}}))
        assert SECRET not in line, (name, line)
        if name not in ("body", "answer", "answer_text", "text", "content", "arguments",
                        "display", "source_meta", "messages", "tool_calls"):
            line = formatter.format(record(**nested))
            assert SECRET not in line, (name, line)
    for credential in CREDENTIALS:
        for value in (credential, f"Bearer {credential}", f"/v1/ws?ticket={credential}&x=1",
                      {"headers": {"X-Header": f"bearer {credential}"}}, [credential]):
            rec = record(url=value, error=value, harmless=value)
            rec.msg, rec.args = "sent %s", (value,)
            line = formatter.format(rec)
            assert credential not in line, (value, line)
    url = formatter.format(record(url="postgresql://maxclaw:pa55word@db/maxclaw"))
    assert "pa55word" not in url and "maxclaw:***@db" in url


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
