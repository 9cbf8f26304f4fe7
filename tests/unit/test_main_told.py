"""What Max and the asking agent are told when Main acts (issue 16, item 5), without a
database: the texts, the payloads, APNs' rendering, and that a secret never shows."""

from __future__ import annotations

from typing import Any

from maxclaw.cards.definitions import components_of_tool_call
from maxclaw.cards.text import (
    answer_label,
    handed_back_push_body,
    handed_back_text,
    handed_text,
    main_answered_push_body,
    main_answered_text,
)
from maxclaw.push.action_tokens import wants_token
from maxclaw.push.adapters.apns import CATEGORY_CHOICE, CATEGORY_MAIN_ANSWERED, render
from maxclaw.push.adapters.base import Delivery
from maxclaw.push.payload import build_payload, handed_back_payload, main_answered_payload
from tests.cards import CHOICE, SECRET, TEXT

CARD = components_of_tool_call({"id": "call_5", "name": "ask_user_question", "arguments": {
    "title": "Rename the status field", "questions": [CHOICE, TEXT, SECRET]}})
CHOSEN, WRITTEN, SECRETIVE = (CARD.component(f"call_5:{q}") for q in ("q1", "q2", "q3"))
PLANTED = "tok-planted-3b9c"


def decision(**fields: Any) -> dict[str, Any]:
    return {"id": 9, "component_id": "call_5:q1", "thread_id": "t-1", "title": "Rename",
            "body": CHOICE["question"], "options": [], "allow_text": True, "sensitive": False,
            **fields}


def apns(payload: dict[str, Any], **config: Any) -> Delivery:
    return Delivery(outbox_id=1, user_id="u", device_id=2, decision_id=9, kind="notify",
                    payload=payload, platform="apns", attempt=1, secret=None,
                    config={"token": "a1" * 32, "topic": "com.example.maxclaw",
                            "environment": "sandbox", **config})


def test_the_labels_max_and_the_agent_read() -> None:
    assert answer_label(CHOSEN, {"selected": ["keep"], "text": "for one release"}) == \
        "Keep one version; for one release"
    assert answer_label(WRITTEN, {"selected": [], "text": "Ship Friday"}) == "Ship Friday"
    assert main_answered_push_body(CHOSEN, {"selected": ["drop"]}) == \
        f"Main answered '{CHOICE['question']}' for you: Remove it now"
    text = main_answered_text(CHOSEN, {"selected": ["keep"]}, 'the usual "rule"')
    assert text.startswith('Main answered the question "Rename the status field" (question '
                           "card call_5:q1) on Max's behalf: Keep one version.")
    assert 'Main\'s reason: "the usual \\"rule\\""' in text  # quoted data, not a line
    assert handed_text(CHOSEN).startswith("Question handed to Main: ")
    assert handed_back_text(CHOSEN).startswith("Main handed the question back to Max: ")
    assert handed_back_push_body(CHOSEN, "yours") == \
        f"Main handed this back to you: yours\n{CHOICE['question']}"


def test_a_secret_answer_is_never_written_where_max_or_the_history_reads() -> None:
    answer = {"selected": [], "text": PLANTED}
    for written in (answer_label(SECRETIVE, answer),
                    main_answered_push_body(SECRETIVE, answer),
                    main_answered_text(SECRETIVE, answer, "because")):
        assert PLANTED not in written and "(secret)" in written
    payload = main_answered_payload(decision(sensitive=True), "Refactor",
                                    main_answered_push_body(SECRETIVE, answer), None)
    assert PLANTED not in str(payload) and payload["secret"] is True
    assert not wants_token(apns(payload))  # a secret's notification carries no token


def test_the_main_answered_payload_and_its_token() -> None:
    payload = main_answered_payload(decision(), "Refactor", "Main answered …", "usual")
    assert payload["kind"] == "main-answered" and payload["v"] == 1
    assert [a["id"] for a in payload["actions"]] == ["why", "revoke"]
    assert payload["url"] == "/#/t/t-1" and payload["reason"] == "usual"
    assert payload["collapse_id"] == build_payload(decision(), "Refactor")["collapse_id"]
    assert wants_token(apns(payload))
    [alert] = render(apns(payload), 0)
    assert alert.message["aps"]["category"] == CATEGORY_MAIN_ANSWERED
    assert alert.message["maxclaw"]["actions"][1] == {"id": "revoke", "title": "Revoke"}


def test_the_handed_back_payload_is_the_question_with_the_note() -> None:
    question = build_payload(decision(options=[{"id": "keep", "label": "Keep",
                                                "recommended": True}]), "Refactor")
    back = handed_back_payload(decision(options=[{"id": "keep", "label": "Keep",
                                                  "recommended": True}]), "Refactor",
                               "Main handed this back to you: yours\nQ?", "yours")
    assert back["kind"] == "agent-question" and back["main_note"] == "yours"
    assert back["actions"] == question["actions"] and back["reply"] == question["reply"]
    assert render(apns(back), 0)[0].message["aps"]["category"] == CATEGORY_CHOICE


def test_mains_answer_is_one_alert() -> None:
    """Its Live Activity follows from the settled decision (an ``activity`` row), not from
    this push."""
    payload = main_answered_payload(decision(), "Refactor", "Main answered …", None)
    [alert] = render(apns(payload, live_activity_token="b2" * 40), now_s=50)
    assert alert.push_type == "alert"
