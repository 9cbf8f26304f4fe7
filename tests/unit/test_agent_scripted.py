"""The scripted model: first unused entry whose condition holds; position read from the
conversation, so another runtime continues where one stopped."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from maxclaw.client import scenario
from maxclaw.client.runtime.scripted import Script, ScriptedModel, load_script

SCRIPT = Script.model_validate({"replies": [
    {"id": "ask", "tool_calls": [{"name": "ask_user_question", "arguments": {"title": "T"}}]},
    {"id": "look", "content": "looking"},
    {"id": "yes", "when": {"user_says": "Chose: Yes"}, "content": "doing it"},
    {"id": "after-yes", "when": {"after": "yes"}, "content": "done"},
    {"id": "wait", "when": {"user_lacks": "Answer to"}, "content": "waiting", "repeat": True},
], "default": {"content": "idle"}})


def assistant(content: str | None, calls: list[tuple[str, dict[str, Any]]] = ()) -> dict[str, Any]:  # type: ignore[assignment]
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [{"id": f"x{i}", "type": "function",
                                  "function": {"name": n, "arguments": json.dumps(a)}}
                                 for i, (n, a) in enumerate(calls)]
    return message


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


ASKED = assistant(None, [("ask_user_question", {"title": "T"})])


def test_entries_are_taken_in_order_and_used_once() -> None:
    model = ScriptedModel(SCRIPT)
    assert model.choose([user("go")]).id == "ask"
    assert model.choose([user("go"), ASKED]).id == "look"
    convo = [user("go"), ASKED, assistant("looking")]
    assert model.choose(convo).id == "wait"
    assert model.choose([*convo, assistant("waiting")]).id == "wait"  # repeat


def test_branches_on_whether_the_answer_has_arrived() -> None:
    model = ScriptedModel(SCRIPT)
    convo = [user("go"), ASKED, assistant("looking"), user('Answer to "T"\nChose: Yes')]
    assert model.choose(convo).id == "yes"
    assert model.choose([*convo, assistant("doing it")]).id == "after-yes"
    done = [*convo, assistant("doing it"), assistant("done")]
    assert model.choose(done).content == "idle"  # default: nothing matches
    other = [user("go"), ASKED, assistant("looking"), user('Answer to "T"\nChose: No')]
    assert model.choose(other).content == "idle"


async def test_complete_records_requests_makes_unique_ids_and_runs_the_hook() -> None:
    seen: list[int] = []

    async def hook(n: int, _: list[dict[str, Any]]) -> None:
        seen.append(n)

    model = ScriptedModel(SCRIPT, hook)
    first = await model.complete([user("go")], [])
    again = await model.complete([user("go")], [])
    assert seen == [1, 2]
    assert len(model.requests) == 2
    assert first.tool_calls[0]["function"]["name"] == "ask_user_question"
    assert json.loads(first.tool_calls[0]["function"]["arguments"]) == {"title": "T"}
    assert first.tool_calls[0]["id"] != again.tool_calls[0]["id"]


def test_scripts_load_from_yaml_and_json(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(
        "replies:\n  - id: a\n    content: hi\n    when: {user_says: x}\n", encoding="utf-8")
    (tmp_path / "s.json").write_text(json.dumps({"replies": [{"content": "hi"}]}),
                                     encoding="utf-8")
    assert load_script(tmp_path / "s.yaml").replies[0].when.user_says == ["x"]
    assert load_script(tmp_path / "s.json").replies[0].content == "hi"
    (tmp_path / "bad.yaml").write_text("replies:\n  - contnet: typo\n", encoding="utf-8")
    with pytest.raises(ValidationError):
        load_script(tmp_path / "bad.yaml")


def test_the_level4_scenario_script_is_valid() -> None:
    script = scenario.level4_script(0.1)
    ids = [e.id for e in script.replies]
    assert ids[0] == "ask"
    assert all(e.delay_s == 0.1 for e in script.replies)
    assert scenario.ORDERS_KEEP != scenario.ORDERS_DROP


async def test_a_script_names_an_earlier_card_by_its_reply() -> None:
    """``$call:<entry>`` is the call id that entry's reply carried in this conversation; an
    entry whose reference has not replied yet waits, and a resolved one counts as used."""
    script = Script.model_validate({"replies": [
        {"id": "ask", "tool_calls": [{"name": "ask_user_question", "arguments": {"title": "A"}},
                                     {"name": "ask_user_question", "arguments": {"title": "B"}}]},
        {"id": "replan", "tool_calls": [
            {"name": "ask_user_question",
             "arguments": {"title": "A2", "supersedes": ["$call:ask"]}},
            {"name": "withdraw_question",
             "arguments": {"tool_call_id": "$call:ask:1", "reason": "moot"}}]},
        {"id": "orphan", "tool_calls": [{"name": "withdraw_question",
                                         "arguments": {"tool_call_id": "$call:nope"}}]},
    ], "default": {"content": "idle"}})
    model = ScriptedModel(script)
    first = await model.complete([user("go")], [])
    asked = {"role": "assistant", "content": None, "tool_calls": first.tool_calls}
    a_id, b_id = (c["id"] for c in first.tool_calls)
    second = await model.complete([user("go"), asked], [])
    args = [json.loads(c["function"]["arguments"]) for c in second.tool_calls]
    assert args == [{"title": "A2", "supersedes": [a_id]},
                    {"tool_call_id": b_id, "reason": "moot"}]
    replanned = {"role": "assistant", "content": None, "tool_calls": second.tool_calls}
    # replan is used now; orphan's reference never replied: the default
    assert model.choose([user("go"), asked, replanned]).content == "idle"


def test_the_plan_change_scenario_supersedes_and_withdraws() -> None:
    script = scenario.level4_script(plan_change=True)
    ids = [e.id for e in script.replies]
    assert ids[:4] == ["ask", "ask-version", "read-orders", "replan"]
    replan = script.replies[3]
    assert [c.name for c in replan.tool_calls] == ["ask_user_question", "withdraw_question"]
    assert replan.tool_calls[0].arguments["supersedes"] == ["$call:ask"]
    assert "ask-version" not in [e.id for e in scenario.level4_script().replies]


def test_branches_on_what_a_tool_returned() -> None:
    script = Script.model_validate({"replies": [
        {"id": "read", "tool_calls": [{"name": "read_thread", "arguments": {"thread_id": "t"}}]},
        {"id": "answer", "when": {"tool_says": "keep compatibility", "after": "read"},
         "content": "answering"},
    ], "default": {"content": "handing back"}})
    model = ScriptedModel(script)
    read = assistant(None, [("read_thread", {"thread_id": "t"})])
    assert model.choose([user("Hand-off")]).id == "read"
    said = {"role": "tool", "tool_call_id": "x0", "content": '{"text": "keep compatibility"}'}
    assert model.choose([user("Hand-off"), read, said]).id == "answer"
    silent = {"role": "tool", "tool_call_id": "x0", "content": '{"text": "nothing"}'}
    # a user message with the words is not a tool result
    assert model.choose([user("keep compatibility"), read, silent]).content == "handing back"


def test_branches_on_what_a_tool_did_not_return() -> None:
    script = Script.model_validate({"replies": [
        {"id": "back", "when": {"tool_lacks": "keep compatibility"}, "content": "handing back"},
    ], "default": {"content": "nothing"}})
    model = ScriptedModel(script)
    said = {"role": "tool", "tool_call_id": "x0", "content": '{"text": "keep compatibility"}'}
    silent = {"role": "tool", "tool_call_id": "x0", "content": '{"text": "nothing"}'}
    assert model.choose([user("Hand-off"), said]).content == "nothing"
    assert model.choose([user("Hand-off"), silent]).id == "back"
