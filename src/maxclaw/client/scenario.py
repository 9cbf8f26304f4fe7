"""Seed 004's level-4 task as a scripted run: rename an order's ``status`` field to ``state``.

The agent asks Max at its first step whether to keep the old field for one version, surveys
the code while the card is open (three more model requests), and then either applies his
answer or, when it has not arrived, ends its turn saying what it waits for. The two answers
lead to two different files, so a test (and the demo) can tell that the answer was used.

With ``plan_change=True`` the agent does what a model should when its plan changes under an
open question: it also asks whether to bump the API's version, then reads ``orders.py``,
finds that ``status`` is part of the JSON API, and in one step re-asks the first question with
that in mind (``supersedes`` the old card, so Max never sees both open) and withdraws the
version question it no longer needs (the release tooling bumps it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from maxclaw.client.runtime.scripted import Script

TASK = "Rename the status field of Order to state, and update its callers."
QUESTION = {
    "title": "Rename the status field",
    "questions": [{
        "id": "q1", "kind": "choice",
        "question": "Keep the old `status` field for one version, or remove it now?",
        "options": [{"id": "keep", "label": "Keep one version", "recommended": True},
                    {"id": "drop", "label": "Remove it now"}],
    }],
}
# the re-asked question after the plan changed (same options, so the answer reads the same)
QUESTION_REVISED = {
    "title": "Rename the status field",
    "questions": [{
        "id": "q1", "kind": "choice",
        "question": "`status` is also in the JSON API: keep it for one version, or remove it "
                    "now (a breaking change for API clients)?",
        "options": [{"id": "keep", "label": "Keep one version", "recommended": True},
                    {"id": "drop", "label": "Remove it now"}],
    }],
    "supersedes": ["$call:ask"],
}
VERSION_QUESTION = {
    "title": "API version",
    "questions": [{
        "id": "q1", "kind": "choice", "question": "Bump the API's version number for this?",
        "options": [{"id": "yes", "label": "Bump it"}, {"id": "no", "label": "Leave it"}],
    }],
}
VERSION_WITHDRAWN = "The release tooling bumps the API version itself; nothing to decide."
REPLAN = ("orders.py: status is serialised into the JSON API too, so the first question was "
          "incomplete. Re-asking it with that in mind, and withdrawing the version question.")
KEEP_CHOICE = "Chose: Keep one version"
DROP_CHOICE = "Chose: Remove it now"

ORDERS = '''class Order:
    def __init__(self, status: str) -> None:
        self.status = status
'''
CALLERS = '''from orders import Order


def is_open(order: Order) -> bool:
    return order.status == "open"
'''
ORDERS_KEEP = '''class Order:
    def __init__(self, state: str) -> None:
        self.state = state

    @property
    def status(self) -> str:
        """Deprecated: use ``state``; removed in the next version."""
        return self.state
'''
ORDERS_DROP = '''class Order:
    """Breaking change: ``status`` was renamed to ``state`` (no alias)."""

    def __init__(self, state: str) -> None:
        self.state = state
'''
CALLERS_NEW = CALLERS.replace("order.status", "order.state")


def write_fixture(workspace: Path) -> None:
    """The small repository the scripted agent works on."""
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "orders.py").write_text(ORDERS, encoding="utf-8")
    (workspace / "callers.py").write_text(CALLERS, encoding="utf-8")


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def level4_script(delay_s: float = 0.0, plan_change: bool = False) -> Script:
    """The scripted model's replies; ``delay_s`` makes each request take that long;
    ``plan_change``: supersede and withdraw when the plan changes (module docstring)."""
    replies: list[dict[str, Any]] = [
        {"id": "ask", "content": "The rename has two reasonable shapes; asking Max while I "
                                 "survey the callers.",
         "tool_calls": [_call("ask_user_question", **QUESTION)]},
        *([{"id": "ask-version", "tool_calls": [_call("ask_user_question", **VERSION_QUESTION)]}]
          if plan_change else []),
        {"id": "read-orders", "tool_calls": [_call("read_file", path="orders.py")]},
        *([{"id": "replan", "content": REPLAN, "tool_calls": [
            _call("ask_user_question", **QUESTION_REVISED),
            _call("withdraw_question", tool_call_id="$call:ask-version",
                  reason=VERSION_WITHDRAWN)]}] if plan_change else []),
        {"id": "read-callers", "tool_calls": [_call("read_file", path="callers.py")]},
        {"id": "grep", "tool_calls": [_call("run_command", command="grep -n status *.py")]},
        {"id": "apply-keep", "when": {"user_says": KEEP_CHOICE},
         "tool_calls": [_call("write_file", path="orders.py", content=ORDERS_KEEP),
                        _call("write_file", path="callers.py", content=CALLERS_NEW)]},
        {"id": "apply-drop", "when": {"user_says": DROP_CHOICE},
         "tool_calls": [_call("write_file", path="orders.py", content=ORDERS_DROP),
                        _call("write_file", path="callers.py", content=CALLERS_NEW)]},
        {"id": "done-keep", "when": {"after": "apply-keep"},
         "content": "Done: status is now state, with a deprecated status alias for one version."},
        {"id": "done-drop", "when": {"after": "apply-drop"},
         "content": "Done: status is now state; the old field is gone (a breaking change)."},
        {"id": "wait", "when": {"user_lacks": "Answer to"}, "repeat": True,
         "content": "Surveyed every use of status (orders.py, callers.py). The change itself "
                    "depends on your answer to the card, so I stop here until it arrives."},
    ]
    for reply in replies:
        reply["delay_s"] = delay_s
    return Script.model_validate({"replies": replies})
