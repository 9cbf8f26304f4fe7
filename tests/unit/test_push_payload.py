"""The push payload's rules (api.md "Push payload"), one card kind at a time."""

from __future__ import annotations

import json
from typing import Any

from maxclaw.push.payload import (
    build_payload,
    encoded_size,
    fit_payload,
    json_bytes,
    withdraw_payload,
)

THREAD = "5b0c7c4e-2a55-4a52-9d7a-0a8f4a3f0b11"


def decision(**fields: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": 12, "kind": "agent-question", "status": "open", "component_id": "call_7:q1",
        "thread_id": THREAD, "dedupe_key": "ask:call_7:q1", "title": "Rename the status field",
        "body": "Keep the old field for one version?", "options": [], "allow_text": False,
        "sensitive": False, "answer_text": None}
    row.update(fields)
    return row


CHOICE_OPTIONS = [{"id": "drop", "label": "Remove it now", "recommended": False},
                  {"id": "keep", "label": "Keep one version", "recommended": True}]


def test_choice_with_allow_other_is_the_spec_example() -> None:
    payload = build_payload(decision(options=CHOICE_OPTIONS, allow_text=True), "Refactor")
    assert payload == {
        "v": 1, "kind": "agent-question", "decision_id": 12, "component_id": "call_7:q1",
        "thread_id": THREAD, "title": "Refactor", "body": "Keep the old field for one version?",
        "actions": [{"id": "opt:keep", "title": "Keep one version", "recommended": True},
                    {"id": "opt:drop", "title": "Remove it now"},
                    {"id": "other", "title": "Other…", "input": True}],
        "reply": {"placeholder": "Reply…"}, "multiple": False, "collapse_id": "ask:call_7:q1",
        "secret": False, "urgency": "normal"}


def test_recommended_first_keeps_the_order_within_each_group() -> None:
    options = [{"id": "a", "label": "A", "recommended": False},
               {"id": "b", "label": "B", "recommended": True},
               {"id": "c", "label": "C", "recommended": False},
               {"id": "d", "label": "D", "recommended": True}]
    payload = build_payload(decision(options=options), "t")
    assert [a["id"] for a in payload["actions"]] == ["opt:b", "opt:d", "opt:a", "opt:c"]


def test_choice_without_allow_other_has_no_other_and_no_reply() -> None:
    payload = build_payload(decision(options=CHOICE_OPTIONS, allow_text=False), "t")
    assert [a["id"] for a in payload["actions"]] == ["opt:keep", "opt:drop"]
    assert payload["reply"] is None
    assert all("input" not in a for a in payload["actions"])


def test_text_card_has_only_the_reply_box() -> None:
    payload = build_payload(decision(options=[], allow_text=True,
                                     body="Anything for the changelog?"), "t")
    assert payload["actions"] == []
    assert payload["reply"] == {"placeholder": "Reply…"}


def test_secret_card_has_no_options_and_the_not_echoed_placeholder() -> None:
    # even if a buggy caller passed options, a sensitive card shows none
    payload = build_payload(decision(options=CHOICE_OPTIONS, allow_text=True, sensitive=True,
                                     body="Paste the deploy token"), "t")
    assert payload["actions"] == []
    assert payload["reply"] == {"placeholder": "Input (not echoed)…"}
    assert payload["secret"] is True  # the WebUI's worker opens the app instead of answering


def test_object_card_actions_are_its_buttons() -> None:
    buttons = [{"id": "apply", "label": "Apply", "recommended": False},
               {"id": "reject", "label": "Reject", "recommended": False}]
    payload = build_payload(decision(options=buttons, allow_text=False,
                                     body="Apply this diff?"), "t")
    assert payload["actions"] == [{"id": "opt:apply", "title": "Apply"},
                                  {"id": "opt:reject", "title": "Reject"}]
    assert payload["reply"] is None


def test_untitled_thread_falls_back_to_the_card_title() -> None:
    assert build_payload(decision(), "")["title"] == "Rename the status field"


def test_payload_never_carries_the_answer_text() -> None:
    settled = decision(sensitive=True, allow_text=True, answer_text="(hidden)",
                       status="settled")
    text = json.dumps([build_payload(settled, "t"), withdraw_payload(settled)])
    assert "(hidden)" not in text
    assert "answer" not in text


def test_withdraw_is_kind_and_collapse_id_only() -> None:
    assert withdraw_payload(decision()) == {"v": 1, "kind": "withdraw",
                                            "collapse_id": "ask:call_7:q1"}


def test_fit_payload_shrinks_body_then_titles_and_keeps_ids() -> None:
    options = [{"id": f"o{i}", "label": "L" * 200, "recommended": i == 3} for i in range(12)]
    big = build_payload(decision(options=options, allow_text=True, body="Q" * 2000), "T" * 500)
    assert encoded_size(big) > 4000
    fitted = fit_payload(big, 3000)
    assert encoded_size(fitted) <= 3000
    assert [a["id"] for a in fitted["actions"]] == [a["id"] for a in big["actions"]]
    assert fitted["body"].endswith("…")
    assert fitted["body"].startswith("QQQ")
    small = build_payload(decision(), "t")
    assert fit_payload(small, 3000) is small


def test_json_bytes_is_compact_utf8() -> None:
    assert json_bytes({"t": "Other…"}) == '{"t":"Other…"}'.encode()
