"""The thread's derived state and the whole-card answer's pure parts (issue 16, items 7 and 8)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from maxclaw.cards.answers import validate_card_answers
from maxclaw.cards.definitions import components_of_tool_call
from maxclaw.cards.text import card_answer_meta, card_answer_text
from maxclaw.components.machine import UNSETTLED, statuses
from maxclaw.errors import Invalid
from maxclaw.timeline.projections import thread_state
from maxclaw.turns.background import JobReport, job_report
from maxclaw.turns.guard import looks_forged
from maxclaw.turns.history import answered_components

MIGRATION = Path(__file__).parents[2] / "alembic" / "versions" / "0012_life_b.py"
CALL = {"id": "call_1", "name": "ask_user_question", "arguments": {
    "title": "Plan", "questions": [
        {"id": "q1", "kind": "choice", "question": "Which?",
         "options": [{"id": "a", "label": "Alpha"}, {"id": "b", "label": "Beta"}]},
        {"id": "q2", "kind": "secret", "question": "Token?"}]}}


def test_the_trigger_counts_exactly_the_unsettled_statuses() -> None:
    spec = importlib.util.spec_from_file_location("m0006", MIGRATION)
    assert spec is not None and spec.loader is not None
    text = MIGRATION.read_text()
    declared = re.search(r'^UNSETTLED = "\((.*)\)"$', text, re.M)
    assert declared is not None
    assert sorted(s.strip(" '") for s in declared.group(1).split(",")) == statuses(UNSETTLED)


@pytest.mark.parametrize(("turn_state", "open_cards", "jobs", "state"), [
    ("running", 0, 0, "running"), ("queued", 3, 0, "running"), ("running", 2, 0, "running"),
    ("running", 0, 2, "running"), ("queued", 0, 1, "running"),
    ("idle", 2, 0, "waiting for you"), ("idle", 2, 3, "waiting for you"),
    ("idle", 0, 1, "working in the background"), ("idle", 0, 2, "working in the background"),
    ("idle", 0, 0, "idle")])
def test_thread_state(turn_state: str, open_cards: int, jobs: int, state: str) -> None:
    assert thread_state(turn_state, open_cards, jobs) == state


def test_card_answers_are_validated_with_their_paths() -> None:
    card = components_of_tool_call(CALL)
    ok = validate_card_answers(card, {"q1": {"selected": ["a"]}, "q2": {"text": "s3cret"}})
    assert ok == {"call_1:q1": {"selected": ["a"], "text": None},
                  "call_1:q2": {"selected": [], "text": "s3cret"}}
    with pytest.raises(Invalid) as caught:
        validate_card_answers(card, {"q1": {"selected": ["z"]}, "q7": {}, "q2": {}})
    locs = [e["loc"] for e in caught.value.errors]
    assert locs == [["body", "answers", "q1", "selected"], ["body", "answers", "q7"],
                    ["body", "answers", "q2", "text"]]
    for bad in ({}, [], None, "q1"):
        with pytest.raises(Invalid):
            validate_card_answers(card, bad)


def test_one_message_for_a_card_names_each_answer_and_hides_secrets_in_meta() -> None:
    card = components_of_tool_call(CALL)
    pairs = [(card.components[0], {"selected": ["b"], "text": None}),
             (card.components[1], {"selected": [], "text": "s3cret"})]
    body = card_answer_text(pairs)
    assert body.startswith('Max answered 2 questions of the card "Plan" at once:')
    assert "Chose: Beta" in body and "Secret answer: s3cret" in body
    assert looks_forged(body)  # a model copying it is flagged like a single answer
    meta = card_answer_meta("call_1", pairs, "card")
    assert "s3cret" not in str(meta)
    row = SimpleNamespace(source_meta=meta)  # the one attribute a message row is read for
    assert answered_components([row]) == ["call_1:q1", "call_1:q2"]  # type: ignore[list-item]


@pytest.mark.parametrize(("meta", "report"), [
    (None, None), ({}, None), ({"link": "x"}, None),
    ({"backgroundJob": {"job_id": "job_1", "phase": "started", "command": "make"}},
     JobReport("job_1", "started")),
    ({"backgroundJob": {"job_id": "job_1", "phase": "finished", "exit_code": 0}},
     JobReport("job_1", "finished")),
    # a report without a phase is an end: what runtimes posted before starts were reported
    ({"backgroundJob": {"job_id": "job_1", "exit_code": 0, "tail": "ok"}},
     JobReport("job_1", "finished"))])
def test_a_background_job_report_is_read(meta: dict[str, object] | None,
                                         report: JobReport | None) -> None:
    assert job_report(meta) == report


@pytest.mark.parametrize(("job", "field"), [
    ("job_1", []), (["job_1"], []), ({}, ["job_id"]), ({"job_id": ""}, ["job_id"]),
    ({"job_id": "  "}, ["job_id"]), ({"job_id": 7}, ["job_id"]),
    ({"job_id": "j" * 201}, ["job_id"]),
    ({"job_id": "job_1", "phase": "running"}, ["phase"]),
    ({"job_id": "job_1", "phase": None}, ["phase"])])
def test_a_malformed_background_job_report_names_its_field(job: object,
                                                           field: list[str]) -> None:
    with pytest.raises(Invalid) as caught:
        job_report({"backgroundJob": job})
    assert caught.value.errors[0]["loc"] == ["body", "source_meta", "backgroundJob", *field]
