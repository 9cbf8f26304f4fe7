"""The one push payload shape (``api.md`` "Push payload"), built from a decision row.

Adapters render this dict per platform (Web Push body, webhook body, APNs ``aps`` + custom
key); nothing here depends on a platform. A decision row never holds a secret answer, and the
payload is built from the question only, so a payload cannot carry one either.
"""

from __future__ import annotations

import json
from typing import Any

OTHER_ACTION = {"id": "other", "title": "Other…", "input": True}
REPLY_PLACEHOLDER = "Reply…"
SECRET_PLACEHOLDER = "Input (not echoed)…"
ELLIPSIS = "…"
# Every payload says which shape it is; a receiver shows a plain "open MaxClaw" notification
# for a version it does not know rather than guessing at fields.
PAYLOAD_VERSION = 1


def collapse_id(component_id: str) -> str:
    """The key that lets a later push (withdraw, re-notify) replace an earlier one."""
    return f"ask:{component_id}"


def ordered_options(options: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Recommended options first, then the others; each group keeps the card's order."""
    return ([o for o in options if o.get("recommended")]
            + [o for o in options if not o.get("recommended")])


def build_actions(decision: dict[str, Any]) -> list[dict[str, Any]]:
    """The buttons: options (recommended first), then "Other…" for a choice with allow_other."""
    if decision.get("sensitive"):
        return []  # a secret card takes only the reply box
    options: list[dict[str, Any]] = list(decision.get("options") or [])
    # ``recommended`` lets a client that shows fewer buttons than there are options keep the
    # recommended one (with "Other…"/"Open") instead of cutting the list short (issue 29)
    actions: list[dict[str, Any]] = [
        {"id": f"opt:{o['id']}", "title": o["label"], **({"recommended": True}
                                                          if o.get("recommended") else {})}
        for o in ordered_options(options)]
    # options + allow_text is a choice with allow_other; a text card (no options) gets only
    # the reply box, and an object card's buttons come without "Other…" (allow_text is false)
    if options and decision.get("allow_text"):
        actions.append(dict(OTHER_ACTION))
    return actions


def build_reply(decision: dict[str, Any]) -> dict[str, str] | None:
    """The reply box, or None when the card takes no text."""
    if decision.get("sensitive"):
        return {"placeholder": SECRET_PLACEHOLDER}
    if decision.get("allow_text"):
        return {"placeholder": REPLY_PLACEHOLDER}
    return None


def build_payload(decision: dict[str, Any], thread_title: str) -> dict[str, Any]:
    """The ``agent-question`` notification for an open decision (``api.md``)."""
    component_id = str(decision["component_id"])
    thread_id = decision.get("thread_id")
    return {
        "v": PAYLOAD_VERSION,
        "kind": "agent-question",
        "decision_id": int(decision["id"]),
        "component_id": component_id,
        "thread_id": str(thread_id) if thread_id is not None else None,
        # the thread's title says where the question comes from; an untitled thread falls
        # back to the card's own title so the lock screen never shows an empty heading
        "title": thread_title or str(decision.get("title") or "") or "MaxClaw",
        "body": str(decision.get("body") or ""),
        "actions": build_actions(decision),
        "reply": build_reply(decision),
        # a multi-select question: one tap cannot answer it, so a client opens the card
        "multiple": bool(decision.get("multiple")),
        "collapse_id": collapse_id(component_id),
        # a secret question is answered only inside the app: no token, the tap opens it
        "secret": bool(decision.get("sensitive")),
        # the agent's hint (normal | time-sensitive); the dispatcher turns it into an
        # interruption level outside his quiet hours (push/shaping.py)
        "urgency": str(decision.get("urgency") or "normal"),
    }


# the buttons of "Main answered … for you": Why? opens the card (``url``), Revoke answers
# ``POST /v1/push/actions`` with ``action: "revoke"`` and the payload's revoke-scoped token
MAIN_ANSWERED_ACTIONS = ({"id": "why", "title": "Why?", "open": True},
                         {"id": "revoke", "title": "Revoke"})


# The confirmation of an answer given from a notification is shown by the device itself (the
# service worker, or the app's notification service extension) from the answer's response
# (``take_back``): one button, "Take back", which sends ``action: "retract"`` with its token.
# APNs apps register this category for that local notification.
TAKE_BACK_CATEGORY = "MAXCLAW_TAKE_BACK"


def card_url(thread_id: str | None, component_id: str) -> str:
    """Where the WebUI shows the card (its thread; the app focuses ``component_id``)."""
    return f"/#/t/{thread_id}" if thread_id else "/"


def main_answered_payload(decision: dict[str, Any], thread_title: str, body: str,
                          reason: str | None) -> dict[str, Any]:
    """The ``main-answered`` notification: Main answered the decision's question for Max.
    ``body`` is built by the caller from the question and Main's answer (``(secret)`` for a
    sensitive one); ``reason`` is Main's, what "Why?" shows."""
    component_id = str(decision["component_id"])
    thread_id = decision.get("thread_id")
    thread = str(thread_id) if thread_id is not None else None
    return {
        "v": PAYLOAD_VERSION,
        "kind": "main-answered",
        "decision_id": int(decision["id"]),
        "component_id": component_id,
        "thread_id": thread,
        "title": thread_title or str(decision.get("title") or "") or "MaxClaw",
        "body": body,
        "reason": reason,
        "actions": [dict(a) for a in MAIN_ANSWERED_ACTIONS],
        "reply": None,
        "url": card_url(thread, component_id),
        # the same key as the question's: this replaces its notification, and a reopened
        # question's (after Revoke) replaces this one
        "collapse_id": collapse_id(component_id),
        "secret": bool(decision.get("sensitive")),
    }


def handed_back_payload(decision: dict[str, Any], thread_title: str, body: str,
                        note: str | None) -> dict[str, Any]:
    """The question's notification again after Main handed it back: the same buttons and
    reply box (it is still open), the body led by Main's note (``main_note``)."""
    return {**build_payload(decision, thread_title), "body": body, "main_note": note}


def withdraw_payload(decision: dict[str, Any]) -> dict[str, Any]:
    """The push that replaces (removes) a settled decision's notification."""
    return {"v": PAYLOAD_VERSION, "kind": "withdraw",
            "collapse_id": collapse_id(str(decision["component_id"]))}


def encoded_size(payload: dict[str, Any]) -> int:
    """Bytes of the compact UTF-8 JSON the adapters send."""
    return len(json_bytes(payload))


def json_bytes(payload: dict[str, Any]) -> bytes:
    """Compact UTF-8 JSON: what goes on the wire (and what a webhook signature covers)."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + ELLIPSIS


def fit_payload(payload: dict[str, Any], max_bytes: int) -> dict[str, Any]:
    """A copy whose JSON fits ``max_bytes``: the body shrinks first, then action titles.

    Push services cap a message at about 4 KiB, and a card may carry a 2,000-character
    question and twelve 200-character labels. Ids are never cut: they are what an action
    answers with. The full question stays one tap away in the app.
    """
    if encoded_size(payload) <= max_bytes:
        return payload
    out: dict[str, Any] = json.loads(json.dumps(payload))
    for body_limit in (1000, 500, 200, 80):
        out["body"] = _shorten(str(payload.get("body") or ""), body_limit)
        if encoded_size(out) <= max_bytes:
            return out
    for title_limit in (60, 30, 12):
        out["actions"] = [{**a, "title": _shorten(a["title"], title_limit)}
                          for a in payload.get("actions") or []]
        out["title"] = _shorten(str(payload.get("title") or ""), title_limit * 2)
        if encoded_size(out) <= max_bytes:
            return out
    return out
