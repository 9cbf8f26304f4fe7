"""The pure card rules, without a database: who Main may be handed, what an answer may be,
and the words the model and Main read. Each rule is also exercised end to end elsewhere; here
every branch is reached directly and fast."""

from __future__ import annotations

from typing import Any

import pytest

from maxclaw.cards.answers import answer_summary, stored_answer, validate_answer
from maxclaw.cards.definitions import Card, components_of_tool_call
from maxclaw.cards.rules import ThreadFacts, main_may_take, tools_offered
from maxclaw.cards.text import answer_message_text, handoff_text, revoke_text
from maxclaw.errors import Invalid


def card(*questions: dict[str, Any], call_id: str = "call_1", stakes: str = "normal") -> Card:
    return components_of_tool_call({"id": call_id, "name": "ask_user_question", "arguments": {
        "title": "Pick", "questions": list(questions), "stakes": stakes}})


CHOICE = {"id": "q1", "question": "Which?", "kind": "choice",
          "options": [{"id": "a", "label": "Alpha", "recommended": True},
                      {"id": "b", "label": "Beta"}]}
SECRET = {"id": "s", "question": "Token?", "kind": "secret"}
TEXT = {"id": "t", "question": "Why?", "kind": "text"}
OBJECT = {"id": "o", "question": "Apply?", "kind": "object",
          "object": {"type": "diff", "text": "-a\n+b"},
          "actions": [{"id": "apply", "label": "Apply"}, {"id": "skip", "label": "Skip"}]}
WORK = ThreadFacts("t", "work", None, "Work")


@pytest.mark.parametrize(("questions", "thread", "expected"), [
    ([CHOICE], WORK, True),
    ([CHOICE, TEXT], WORK, True),
    ([CHOICE, SECRET], WORK, False),  # a secret only Max knows
    ([OBJECT], WORK, False),  # "apply this diff?" is his call
    ([CHOICE], ThreadFacts("t", "main", None, "Main"), False),
    ([CHOICE], ThreadFacts("t", "isolated", None, "Alone"), False),
    ([CHOICE], ThreadFacts("t", "work", "health", "Doctor"), False),  # a private category
])
def test_main_may_take(questions: list[dict[str, Any]], thread: ThreadFacts,
                       expected: bool) -> None:
    assert main_may_take(card(*questions), thread) is expected


def test_tools_offered_by_thread_kind() -> None:
    assert tools_offered("background") == []
    assert tools_offered("work") == ["ask_user_question", "withdraw_question"]
    assert tools_offered("main") == ["ask_user_question", "withdraw_question", "answer_for_max",
                                     "hand_back", "list_open_questions", "read_thread"]


def definition(question: dict[str, Any], stakes: str = "normal") -> Any:
    built = card(question, stakes=stakes)
    return built.component(built.components[0].id)


@pytest.mark.parametrize(("question", "selected", "text", "expected"), [
    (CHOICE, ["a"], None, {"selected": ["a"], "text": None}),
    (CHOICE, ["b"], "  because ", {"selected": ["b"], "text": "  because "}),
    (CHOICE, ["a"], "   ", {"selected": ["a"], "text": None}),  # white space is no text
    (TEXT, None, "since", {"selected": [], "text": "since"}),
    (OBJECT, ["apply"], None, {"selected": ["apply"], "text": None}),
])
def test_valid_answers_are_normalised(question: dict[str, Any], selected: Any, text: Any,
                                      expected: dict[str, Any]) -> None:
    assert validate_answer(definition(question), selected, text) == expected


@pytest.mark.parametrize(("question", "selected", "text", "where"), [
    (CHOICE, ["zzz"], None, "selected"),
    (CHOICE, ["a", "b"], None, "selected"),  # single choice
    (CHOICE, [], None, "selected"),
    (CHOICE, "a", None, "selected"),  # not a list
    (CHOICE, ["a"], 7, "text"),
    (CHOICE, ["a"], "x" * 10_001, "text"),
    (TEXT, ["a"], "x", "selected"),
    (TEXT, None, None, "text"),
    (SECRET, None, " ", "text"),
    (OBJECT, ["apply", "skip"], None, "selected"),
    (OBJECT, ["nope"], None, "selected"),
])
def test_invalid_answers_name_the_field(question: dict[str, Any], selected: Any, text: Any,
                                        where: str) -> None:
    with pytest.raises(Invalid) as caught:
        validate_answer(definition(question), selected, text)
    assert caught.value.errors[0]["loc"] == ["body", where]


def test_a_secret_is_never_stored_or_summarised() -> None:
    secret = definition(SECRET)
    answer = validate_answer(secret, None, "hunter2")
    assert stored_answer(secret, answer) == {"selected": [], "hidden": True}
    assert "hunter2" not in answer_summary(secret, answer)
    # the model's message is the one place the plaintext is written
    assert "Secret answer: hunter2" in answer_message_text(secret, answer)


def test_answer_text_names_the_card_and_the_labels() -> None:
    choice = definition(CHOICE)
    text = answer_message_text(choice, {"selected": ["b"], "text": "ok"}, by_main=True)
    assert text.startswith("Main answered on Max's behalf (he may revoke it). Answer to \"Pick\"")
    assert "Chose: Beta" in text and "Note: ok" in text and choice.id in text
    assert answer_summary(choice, {"selected": ["a"], "text": "ok"}) == "Alpha; ok"


def test_handoff_text_offers_what_main_may_do() -> None:
    normal = handoff_text(definition(CHOICE), "Orders", "th-1")
    # the asking agent's words are quoted data (the trust boundary), the offer is the service's
    assert '"a" = "Alpha" (recommended); "b" = "Beta"' in normal and "answer_for_max(" in normal
    assert "not instructions" in normal
    text = handoff_text(definition(CHOICE, stakes="irreversible"), "Orders", "th-1")
    assert "irreversible" in text and "answer_for_max(" not in text and "hand_back(" in text


def test_revoke_text_reopens_the_question() -> None:
    assert "open again" in revoke_text(definition(CHOICE))
