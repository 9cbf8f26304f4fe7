"""Timeline rows → Chat Completions messages (the model-facing history)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from maxclaw.timeline.rows import MessageRow
from maxclaw.turns.history import (
    EVENT_PREFIX,
    FORGED_NOTICE,
    answered_components,
    chat_history,
    chat_message,
)

_ids = iter(range(1, 10_000))


def row(role: str, **fields: Any) -> MessageRow:
    base = {"id": next(_ids), "user_id": "u1", "thread_id": "t1", "role": role, "body": None,
            "content": None, "tool_calls": None, "tool_call_id": None, "display": None,
            "source_meta": None, "sensitive": False, "turn_id": None, "delivered_at": None,
            "created_at": datetime(2026, 12, 1, tzinfo=UTC), "rev": 1}
    return MessageRow(**{**base, **fields})


def call(call_id: str, name: str = "read_file", **args: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": args}


def test_each_role_in_the_chat_completions_shape() -> None:
    assert chat_message(row("user", body="hi")) == {"role": "user", "content": "hi"}
    assert chat_message(row("user", body="Secret answer: s3cr3t", sensitive=True)) == {
        "role": "user", "content": "Secret answer: s3cr3t"}  # plaintext, for the model only
    assert chat_message(row("event", body="job done")) == {
        "role": "user", "content": f"{EVENT_PREFIX} job done"}
    event = chat_message(row("event", source_meta={"backgroundJob": {"exit_code": 1}}))
    assert event["content"].startswith(EVENT_PREFIX)
    assert '"exit_code": 1' in event["content"]
    assert chat_message(row("assistant", body="done")) == {"role": "assistant",
                                                           "content": "done"}
    message = chat_message(row("assistant", tool_calls=[call("c1", path="a.py")]))
    assert message == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function",
         "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}]}
    bad = chat_message(row("assistant", tool_calls=[{"id": "c2", "name": "x",
                                                     "arguments": "{not json"}]))
    assert bad["tool_calls"][0]["function"]["arguments"] == "{not json"
    tool = chat_message(row("tool", tool_call_id="c1", content={"posted": True, "n": [1]}))
    assert tool == {"role": "tool", "tool_call_id": "c1", "content": '{"posted": true, "n": [1]}'}
    assert json.loads(tool["content"]) == {"posted": True, "n": [1]}


def test_results_follow_their_call_even_when_input_arrived_in_between() -> None:
    rows = [row("user", body="go"),
            row("assistant", tool_calls=[call("a"), call("b")]),
            row("tool", tool_call_id="a", content=1),
            row("user", body="interjection"),  # written while call b ran
            row("tool", tool_call_id="b", content=2),
            row("assistant", body="ok")]
    roles = [(m["role"], m.get("tool_call_id") or m.get("content")) for m in chat_history(rows)]
    assert roles == [("user", "go"), ("assistant", None), ("tool", "a"), ("tool", "b"),
                     ("user", "interjection"), ("assistant", "ok")]


def test_a_call_without_result_and_an_orphan_result_stay_visible() -> None:
    rows = [row("assistant", tool_calls=[call("lost")]), row("tool", tool_call_id="orphan",
                                                             content=None)]
    out = chat_history(rows)
    assert [m["role"] for m in out] == ["assistant", "tool"]
    assert out[1]["tool_call_id"] == "orphan"


def test_a_forged_row_is_followed_by_the_notice_after_its_results() -> None:
    rows = [row("assistant", body="<background_job_done ...>", tool_calls=[call("a")],
                source_meta={"guard": "forged"}),
            row("tool", tool_call_id="a", content={}),
            row("assistant", body="fine")]
    out = chat_history(rows)
    assert [m["role"] for m in out] == ["assistant", "tool", "user", "assistant"]
    assert out[2]["content"] == FORGED_NOTICE


def test_answered_components_come_from_source_meta() -> None:
    rows = [row("user", source_meta={"componentAnswer": {"componentId": "c:q1"}}),
            row("user", source_meta={"askHandoff": {"componentId": "c:q2"}}),
            row("user", body="plain"), row("event", source_meta={"componentAnswer": "bad"})]
    assert answered_components(rows) == ["c:q1"]
