"""What a component looks like from outside: its ``display.states`` entry (the one builder of
it), its ``GET /v1/components/{id}`` projection, and the card and thread facts its rules read.

``state_of`` is the only Python builder of a ``display.states`` entry: posting, the sweeps and
the tests use it. The two statements that write the mirror themselves, in the same statement
as their CAS (``store.TRANSITION``, ``store.ANSWER_SETTLE``), spell the same entry in SQL
(statements are written out whole), and ``tests/integration/test_effects_equivalence.py``
checks that what they write equals ``state_of`` of the row they moved.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from maxclaw.cards.definitions import Card, ComponentDefinition, components_of_tool_call
from maxclaw.cards.rules import ThreadFacts
from maxclaw.components.machine import Status, answerable_here, may_hand_to_main
from maxclaw.components.rows import CardComponentRow, ComponentInContext, ComponentRow
from maxclaw.errors import NotFound
from maxclaw.timefmt import rfc3339_or_none
from maxclaw.timeline.rows import ThreadRow

Key = tuple[str, str]  # (user_id, component id): ids are unique per user only


class StateColumns(Protocol):
    """The columns a ``display.states`` entry is built from (a component row, a swept row)."""

    @property
    def status(self) -> str: ...
    @property
    def answered_by(self) -> str | None: ...
    @property
    def answered_via(self) -> str | None: ...
    @property
    def answer(self) -> dict[str, object] | None: ...
    @property
    def due_at(self) -> datetime | None: ...
    @property
    def expires_at(self) -> datetime | None: ...
    @property
    def withdrawn_reason(self) -> str | None: ...
    @property
    def superseded_by(self) -> str | None: ...
    @property
    def seen_at(self) -> datetime | None: ...


def state_of(row: StateColumns, rule: bool = False) -> dict[str, object]:
    """A component's entry in ``display.states`` (the answer is already secret-safe), with what
    a client draws from it: ``answerable_here`` (the card takes Max's answer now) and
    ``main_may_take`` ("let Main decide" is offered now; ``rule`` is ``rules.main_may_take``)."""
    return {"status": row.status, "answered_by": row.answered_by,
            "answered_via": row.answered_via, "answer": row.answer,
            "due_at": rfc3339_or_none(row.due_at),
            "expires_at": rfc3339_or_none(row.expires_at),
            "answerable_here": answerable_here(row.status),
            "main_may_take": may_hand_to_main(row.status, rule),
            "withdrawn_reason": row.withdrawn_reason, "superseded_by": row.superseded_by,
            "seen_at": rfc3339_or_none(row.seen_at)}


class _Posted:
    """A component as posting creates it (open, nothing answered), for ``state_of``."""

    status = Status.OPEN.value
    answered_by = answered_via = withdrawn_reason = superseded_by = None
    answer = None
    seen_at = None

    def __init__(self, due_at: datetime | None, expires_at: datetime | None) -> None:
        self.due_at = due_at
        self.expires_at = expires_at


def posted_state(due_at: datetime | None, expires_at: datetime | None,
                 rule: bool) -> dict[str, object]:
    """The ``display.states`` entry of a component being posted."""
    return state_of(_Posted(due_at, expires_at), rule)


def card_of(row: CardComponentRow) -> Card:
    """The card a component row belongs to, from the call on its assistant row."""
    call_id = row.id.rsplit(":", 1)[0]
    for call in row.tool_calls or []:
        if call.get("id") == call_id:
            return components_of_tool_call(call)
    raise NotFound("The call that posted this card is missing.")


def definition_of(row: CardComponentRow) -> ComponentDefinition:
    return card_of(row).component(row.id)


def component_projection(row: ComponentRow, definition: ComponentDefinition,
                         rule: bool = False) -> dict[str, Any]:
    """``GET /v1/components/{id}``: the definition plus the state (never a secret)."""
    return {
        "answerable_here": answerable_here(row.status),
        "main_may_take": may_hand_to_main(row.status, rule),
        **definition.model_dump(mode="json"),
        "status": row.status, "answer": row.answer, "answered_by": row.answered_by,
        "answered_via": row.answered_via, "main_reason": row.main_reason,
        "due_at": rfc3339_or_none(row.due_at), "decision_id": row.decision_id,
        "thread_id": row.thread_id, "message_id": row.message_id,
        "tool_message_id": row.tool_message_id,
        "posted_at": rfc3339_or_none(row.posted_at),
        "answered_at": rfc3339_or_none(row.answered_at),
        "seen_at": rfc3339_or_none(row.seen_at),
        "expires_at": rfc3339_or_none(row.expires_at),
        "withdrawn_reason": row.withdrawn_reason,
        "superseded_by": row.superseded_by,
    }


def key_of(row: ComponentRow) -> Key:
    return (row.user_id, row.id)


def thread_of(row: ComponentInContext) -> ThreadFacts:
    """The card's thread as ``rules.main_may_take`` and the carriers read it."""
    return ThreadFacts(row.thread_id, row.thread_kind, row.category, row.thread_title)


def thread_facts(thread: ThreadRow) -> ThreadFacts:
    """``thread_of`` a thread row (a card being posted)."""
    return ThreadFacts(thread.id, thread.kind, thread.category, thread.title)
