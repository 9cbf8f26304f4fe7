"""Answer validation against a component's definition (``api.md``: "Answer validation").

Pure functions: the service calls them before it touches the database, so an invalid answer
changes nothing.
"""

from __future__ import annotations

from typing import Any

from maxclaw.cards.definitions import Card, ComponentDefinition
from maxclaw.errors import Invalid

MAX_TEXT = 10_000
HIDDEN: dict[str, Any] = {"selected": [], "hidden": True}


def _clean_text(text: Any) -> str | None:
    if text is None:
        return None
    if not isinstance(text, str):
        raise Invalid.at(["body", "text"], "text must be a string or null")
    if len(text) > MAX_TEXT:
        raise Invalid.at(["body", "text"], f"text is at most {MAX_TEXT:,} characters")
    return text if text.strip() else None  # white space only counts as no text


def _clean_selected(selected: Any) -> list[str]:
    if selected is None:
        return []
    if not isinstance(selected, list) or not all(isinstance(s, str) for s in selected):
        raise Invalid.at(["body", "selected"], "selected must be a list of option ids")
    return list(selected)


def validate_answer(definition: ComponentDefinition, selected: Any, text: Any) -> dict[str, Any]:
    """The normalized answer ``{"selected": [...], "text": str|None}``, or ``Invalid``."""
    ids = _clean_selected(selected)
    note = _clean_text(text)
    if definition.kind == "choice":
        known = {o.id for o in definition.options}
        unknown = [i for i in ids if i not in known]
        if unknown:
            raise Invalid.at(["body", "selected"], f"unknown option id {unknown[0]!r}")
        if len(ids) != len(set(ids)):
            raise Invalid.at(["body", "selected"], "option ids must be distinct")
        if definition.multiple:
            if not ids:
                raise Invalid.at(["body", "selected"], "choose one or more options")
        elif len(ids) > 1:
            raise Invalid.at(["body", "selected"], "choose exactly one option")
        elif not ids and not (definition.allow_other and note):
            raise Invalid.at(["body", "selected"],
                             "choose one option" + (" or write your own answer in text"
                                                    if definition.allow_other else ""))
    elif definition.kind in ("text", "secret"):
        if ids:
            raise Invalid.at(["body", "selected"], f"a {definition.kind} question takes no options")
        if note is None:
            raise Invalid.at(["body", "text"], "write an answer in text")
    else:  # object
        known = {a.id for a in definition.actions}
        if len(ids) != 1 or ids[0] not in known:
            raise Invalid.at(["body", "selected"],
                             "choose exactly one action: " + ", ".join(sorted(known)))
    return {"selected": ids, "text": note}


def stored_answer(definition: ComponentDefinition, answer: dict[str, Any]) -> dict[str, Any]:
    """What ``message_components.answer`` and ``display`` hold: never a secret's plaintext."""
    return dict(HIDDEN) if definition.sensitive else answer


def answer_summary(definition: ComponentDefinition, answer: dict[str, Any]) -> str:
    """A short human line (``decisions.answer_text``); a placeholder for secrets."""
    if definition.sensitive:
        return "(submitted, not echoed)"
    parts = [definition.option_label(i) for i in answer["selected"]]
    if answer.get("text"):
        parts.append(str(answer["text"]))
    return "; ".join(parts)


MAX_CARD_ANSWER_KEYS = ("selected", "text")


def validate_card_answers(card: Card, answers: Any) -> dict[str, dict[str, Any]]:
    """A whole card's answers (``{"<question id>": {"selected", "text"}}``) as normalized
    answers by component id, or one ``Invalid`` listing every error at its field path
    (``body.answers.<qid>.selected``…); nothing is written for an invalid request."""
    if not isinstance(answers, dict) or not answers:
        raise Invalid.at(["body", "answers"],
                         "answer at least one question: {\"<question id>\": {\"selected\": "
                         "[...], \"text\": ...}}")
    known = {c.local_id: c for c in card.components}
    out: dict[str, dict[str, Any]] = {}
    errors: list[dict[str, Any]] = []
    for qid, given in answers.items():
        definition = known.get(qid)
        if definition is None:
            errors.append({"loc": ["body", "answers", qid],
                           "msg": "this card has no such question; its questions are "
                                  + ", ".join(sorted(known))})
            continue
        if not isinstance(given, dict) or set(given) - set(MAX_CARD_ANSWER_KEYS):
            errors.append({"loc": ["body", "answers", qid],
                           "msg": "an answer is {\"selected\": [option ids], \"text\": str}"})
            continue
        try:
            out[definition.id] = validate_answer(definition, given.get("selected"),
                                                 given.get("text"))
        except Invalid as exc:  # re-rooted under this question
            errors.extend({"loc": ["body", "answers", qid, *e["loc"][1:]], "msg": e["msg"]}
                          for e in exc.errors)
    if errors:
        first = errors[0]
        raise Invalid(".".join(str(p) for p in first["loc"]) + ": " + first["msg"], errors)
    return out
