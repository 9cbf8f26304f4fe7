"""``components_of_tool_call`` (and its neighbours on the request path) on arbitrary JSON: they
raise nothing but ``Invalid``, never accept what api.md's "Limits" forbid, and accept every card
those limits allow. The forbidding rules below are written from api.md, not from the code."""

from __future__ import annotations

import json
import re
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from maxclaw.cards.answers import validate_answer
from maxclaw.cards.definitions import (
    Card,
    components_of_tool_call,
    normalize_tool_call,
)
from maxclaw.errors import Invalid
from tests.reliability.figures import record, scale

LOCAL_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
KINDS = ("choice", "text", "secret", "object")
DEEP = "[" * 10_000 + "]" * 10_000  # api.md: deep JSON must be refused, not crash

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner,
                                                                max_size=5),
    max_leaves=25)
ids = st.from_regex(LOCAL_ID, fullmatch=True)
short_text = st.text(min_size=1, max_size=40)


# ----- api.md's limits, as an oracle -----

def _utf8_json_size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def _id_ok(value: Any) -> bool:
    return isinstance(value, str) and LOCAL_ID.fullmatch(value) is not None


def _forbidden_question(q: Any) -> str | None:
    if not isinstance(q, dict):
        return "a question is not an object"
    if not _id_ok(q.get("id")):
        return "question id does not match [A-Za-z0-9_-]{1,64}"
    if q.get("kind") not in KINDS:
        return "unknown kind"
    text = q.get("question")
    if not isinstance(text, str) or len(text) > 2000:
        return "question missing or over 2,000 characters"
    for field in ("options", "actions"):
        items = q.get(field)
        if items is None:
            continue
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            return f"{field} is not a list of objects"
        labels = [i.get("label") for i in items]
        if any(not isinstance(label, str) or len(label) > 200 for label in labels):
            return "a label is missing or over 200 characters"
        item_ids = [i.get("id") for i in items]
        if any(not isinstance(i, str) for i in item_ids) or len(set(item_ids)) != len(item_ids):
            return f"{field} ids are not unique strings"
    if q["kind"] == "choice":
        options = q.get("options")
        if not isinstance(options, list) or not 2 <= len(options) <= 12:
            return "a choice needs 2 to 12 options"
    if "object" in q and _utf8_json_size(q["object"]) > 256 * 1024:
        return "object over 256 KiB"
    return None


def forbidden(args: Any) -> str | None:
    """Why api.md's "Limits" forbid these ``ask_user_question`` arguments (None: they don't)."""
    if not isinstance(args, dict):
        return "arguments are not an object"
    questions = args.get("questions")
    if not isinstance(questions, list) or not 1 <= len(questions) <= 8:
        return "1–8 questions"
    for q in questions:
        reason = _forbidden_question(q)
        if reason:
            return reason
    q_ids = [q["id"] for q in questions]
    if len(set(q_ids)) != len(q_ids):
        return "question ids are not unique"
    if "main_after_minutes" in args:
        minutes = args["main_after_minutes"]
        if isinstance(minutes, bool) or not isinstance(minutes, int) \
                or not 0 <= minutes <= 10_080:
            return "main_after_minutes is not an integer from 0 to 10,080"
    if "stakes" in args and args["stakes"] not in ("normal", "irreversible"):
        return "stakes is not normal or irreversible"
    return None


def _check_accepted(call_id: str, args: dict[str, Any], card: Card) -> None:
    assert forbidden(args) is None, f"accepted what api.md forbids: {forbidden(args)}"
    questions = args["questions"]
    assert [c.id for c in card.components] == [f"{call_id}:{q['id']}" for q in questions]
    assert [c.kind for c in card.components] == [q["kind"] for q in questions]
    assert card.stakes == args.get("stakes", "normal")
    assert card.main_after_minutes == args.get("main_after_minutes", 30)
    for c in card.components:
        assert c.title == args["title"]
        assert c.stakes == card.stakes
        assert c.sensitive == (c.kind == "secret")
        if c.kind == "choice":
            assert 2 <= len(c.options) <= 12
        json.dumps([c.model_dump(mode="json") for c in card.components])  # clients get this


def _check_refusal(exc: Invalid) -> None:
    body = json.loads(json.dumps(exc.body()))  # the refusal goes out as JSON
    assert body["code"] == "invalid"
    assert isinstance(body["message"], str)
    assert body["message"]
    errors = body["data"]["errors"]
    assert errors
    assert all(isinstance(e["loc"], list) and isinstance(e["msg"], str)
                          for e in errors)


def run(call: Any) -> str:
    """Feed one call; return "accepted" or "refused" after checking the outcome."""
    try:
        card = components_of_tool_call(call)
    except Invalid as exc:
        _check_refusal(exc)
        return "refused"
    args = call["arguments"]
    _check_accepted(call["id"], json.loads(args) if isinstance(args, str) else args, card)
    return "accepted"


# ----- valid cards by construction (api.md's limits, inclusive) -----

@st.composite
def _items(draw: st.DrawFn, min_size: int, max_size: int) -> list[dict[str, Any]]:
    item_ids = draw(st.lists(ids, min_size=min_size, max_size=max_size, unique=True))
    return [{"id": i, "label": draw(st.text(min_size=1, max_size=200)),
             **({"recommended": draw(st.booleans())} if draw(st.booleans()) else {})}
            for i in item_ids]


@st.composite
def valid_question(draw: st.DrawFn, qid: str) -> dict[str, Any]:
    kind = draw(st.sampled_from(KINDS))
    q: dict[str, Any] = {"id": qid, "kind": kind,
                         "question": draw(st.text(min_size=1, max_size=2000))}
    if kind == "choice":
        q["options"] = draw(_items(2, 12))
        q["multiple"] = draw(st.booleans())
        q["allow_other"] = draw(st.booleans())
    if kind == "object":
        q["object"] = draw(JSON.filter(lambda v: v is not None))
        q["actions"] = draw(_items(1, 12))
    if draw(st.booleans()):
        q["placeholder"] = draw(st.text(max_size=200))
    return q


@st.composite
def valid_args(draw: st.DrawFn) -> dict[str, Any]:
    q_ids = draw(st.lists(ids, min_size=1, max_size=8, unique=True))
    args: dict[str, Any] = {"title": draw(st.text(min_size=1, max_size=200)),
                            "questions": [draw(valid_question(i)) for i in q_ids]}
    if draw(st.booleans()):
        args["stakes"] = draw(st.sampled_from(["normal", "irreversible"]))
    if draw(st.booleans()):
        args["main_after_minutes"] = draw(st.integers(0, 10_080))
    return args


# ----- near-valid cards: one thing broken, often right at a limit -----

BREAKERS = st.sampled_from([
    ("questions", []), ("questions", "nine"), ("stakes", "maybe"), ("stakes", None),
    ("main_after_minutes", -1), ("main_after_minutes", 10_081), ("main_after_minutes", 30.5),
    ("main_after_minutes", True), ("main_after_minutes", "30"), ("title", None),
])


@st.composite
def mutated_args(draw: st.DrawFn) -> dict[str, Any]:
    args = draw(valid_args())
    q = draw(st.sampled_from(args["questions"]))
    how = draw(st.integers(0, 9))
    if how == 0:
        args.__setitem__(*draw(BREAKERS))
    elif how == 1:
        q["question"] = "x" * draw(st.integers(2000, 2002))
    elif how == 2 and q.get("options"):
        q["options"][0]["label"] = "y" * draw(st.integers(200, 202))
    elif how == 3:
        q["id"] = draw(st.sampled_from(["", "a b", "x" * 65, "é", "a:b", "a/b", 7]))
    elif how == 4:
        args["questions"] = args["questions"] * 2  # duplicate ids (and maybe over 8)
    elif how == 5 and q.get("options"):
        q["options"] = q["options"][:1] if draw(st.booleans()) else q["options"] * 7
    elif how == 6:
        q[draw(st.sampled_from(["kind", "options", "actions", "object", "question"]))] = \
            draw(JSON)
    elif how == 7:
        q["object"] = "z" * (256 * 1024 + draw(st.integers(-2, 2)))
        q["kind"] = "object"
        q.setdefault("actions", [{"id": "ok", "label": "OK"}])
    elif how == 8:
        args["questions"].extend(
            draw(valid_question(f"extra{i}")) for i in range(draw(st.integers(1, 8))))
    else:
        args[draw(st.text(max_size=8))] = draw(JSON)
    return args


def _call(call_id: str, args: Any, as_string: bool) -> dict[str, Any]:
    return {"id": call_id, "name": "ask_user_question",
            "arguments": json.dumps(args) if as_string else args}


def _nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


SETTINGS = settings(max_examples=120 * scale(), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@SETTINGS
@given(call=JSON)
@example(call=None)
@example(call={"id": "c1", "name": "ask_user_question", "arguments": DEEP})
@example(call={"id": "c1", "name": "ask_user_question", "arguments": {
    "title": "t", "questions": [{"id": "q", "kind": "object", "question": "?",
                                 "object": _nested(10_000),
                                 "actions": [{"id": "a", "label": "A"}]}]}})
def test_arbitrary_json_is_refused_with_invalid_only(call: Any) -> None:
    record("property", definitions_cases=1)
    run(call)


@SETTINGS
@given(call_id=st.text(min_size=1, max_size=200), args=JSON, as_string=st.booleans())
def test_arbitrary_arguments_are_refused_or_within_limits(call_id: str, args: Any,
                                                          as_string: bool) -> None:
    record("property", definitions_cases=1)
    run(_call(call_id, args, as_string))


@SETTINGS
@given(args=mutated_args(), as_string=st.booleans())
def test_cards_broken_at_the_limits_are_refused(args: dict[str, Any], as_string: bool) -> None:
    record("property", definitions_cases=1)
    outcome = run(_call("call_1", args, as_string))
    record("property", **{f"near_valid_{outcome}": 1})


@SETTINGS
@given(args=valid_args(), as_string=st.booleans())
def test_every_card_within_the_limits_is_accepted(args: dict[str, Any], as_string: bool) -> None:
    record("property", definitions_cases=1)
    assert run(_call("call_1", args, as_string)) == "accepted"


@SETTINGS
@given(call=JSON)
@example(call={"id": "c1", "function": {"name": "ask_user_question", "arguments": DEEP}})
@example(call={"id": "c1", "type": "function", "function": {"name": "x", "arguments": "{"}})
def test_normalize_tool_call_refuses_with_invalid_only(call: Any) -> None:
    """The request path (``POST …/messages``) normalises every call before anything else."""
    record("property", definitions_cases=1)
    try:
        normalize_tool_call(call)
    except Invalid as exc:
        _check_refusal(exc)


@SETTINGS
@given(args=valid_args(), data=st.data())
def test_answer_validation_refuses_with_invalid_only(args: dict[str, Any],
                                                     data: st.DataObject) -> None:
    """Any ``selected`` and ``text`` against any card: an answer api.md allows, or Invalid."""
    record("property", definitions_cases=1)
    card = components_of_tool_call(_call("call_1", args, False))
    definition = data.draw(st.sampled_from(card.components))
    known = [o.id for o in definition.options] + [a.id for a in definition.actions]
    selected = data.draw(st.one_of(JSON, st.lists(st.sampled_from(known) if known else ids,
                                                   max_size=4)))
    text = data.draw(st.one_of(JSON, st.text(max_size=50), st.just(" "),
                               st.just("x" * 10_001)))
    try:
        answer = validate_answer(definition, selected, text)
    except Invalid as exc:
        _check_refusal(exc)
        return
    chosen, note = answer["selected"], answer["text"]
    assert note is None or (isinstance(note, str) and note.strip() and len(note) <= 10_000)
    if definition.kind == "choice" and definition.multiple:
        assert chosen
        assert len(set(chosen)) == len(chosen)
        assert set(chosen) <= set(known)
    elif definition.kind == "choice":
        assert (len(chosen) == 1 and chosen[0] in known) or (
            not chosen and definition.allow_other and note)
    elif definition.kind in ("text", "secret"):
        assert not chosen
        assert note
    else:
        assert len(chosen) == 1
        assert chosen[0] in known
