"""The rows ``components.store`` (and ``tool_store``) return, and the rows they take in bulk
(see ``maxclaw.db.rows``).

One component, several statement shapes, each a subclass that adds the columns its statement
selects beside ``COMPONENT_COLUMNS``::

    ComponentRow                       COMPONENT_COLUMNS (EXPIRE_MOVE, UNWATCHED_MOVE)
    ├── MovedComponent                 + from_status (TRANSITION, ANSWER_SETTLE)
    └── CardComponentRow               + the defining call's tool_calls (THREAD_CARDS)
        └── ComponentInContext         + its thread's kind, category, title (GET_WITH_CONTEXT…)
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from maxclaw.db.rows import Row


@dataclass(frozen=True, slots=True)
class ComponentRow(Row):
    """``COMPONENT_COLUMNS`` of ``message_components``."""

    id: str  # "<tool_call_id>:<question id>", unique per user
    user_id: str
    thread_id: str
    message_id: int  # the assistant row whose call defines the card
    tool_message_id: int  # the tool row whose display.states mirrors this component
    kind: str
    stakes: str
    sensitive: bool
    status: str  # a components.machine.Status value
    answer: dict[str, object] | None  # already secret-safe
    answered_by: str | None
    answered_via: str | None
    main_reason: str | None
    due_at: datetime | None
    decision_id: int | None  # the carrier, when it has one
    posted_at: datetime
    answered_at: datetime | None
    seen_at: datetime | None
    expires_at: datetime | None
    withdrawn_reason: str | None
    superseded_by: str | None


@dataclass(frozen=True, slots=True)
class MovedComponent(ComponentRow):
    """A component as a transition left it, with the status it moved from."""

    from_status: str


@dataclass(frozen=True, slots=True)
class CardComponentRow(ComponentRow):
    """A component with the tool calls of the assistant row that defines its card."""

    tool_calls: list[dict[str, object]] | None


@dataclass(frozen=True, slots=True)
class ComponentInContext(CardComponentRow):
    """A component with what its rules need: its defining call and its thread."""

    thread_kind: str
    category: str | None
    thread_title: str


@dataclass(frozen=True, slots=True)
class SweptComponent(Row):
    """A component the due sweep moved (``SWEEP_MOVE``'s columns)."""

    user_id: str
    id: str
    status: str
    answered_by: str | None
    answered_via: str | None
    answer: dict[str, object] | None
    due_at: datetime | None
    decision_id: int | None
    expires_at: datetime | None
    seen_at: datetime | None
    withdrawn_reason: str | None
    superseded_by: str | None


@dataclass(frozen=True, slots=True)
class ComponentStatus(Row):
    """A component's id and status (a card's components in one thread)."""

    id: str
    status: str


@dataclass(frozen=True, slots=True)
class AnswerMessage(Row):
    """The message holding Max's answer to a component (``retract_store.ANSWER_MESSAGE``)."""

    id: int
    delivered_at: datetime | None  # set: a model was handed it (it can no longer be retracted)


@dataclass(frozen=True, slots=True)
class NewComponent:
    """A component row to insert (``insert_components``; ``post_cards`` takes the same
    fields from ``CardRows.components``, with the ids the statement itself assigns)."""

    id: str
    user_id: str
    thread_id: str
    kind: str
    stakes: str
    sensitive: bool
    due_at: datetime | None
    expires_at: datetime | None
    message_id: int | None = None  # the assistant row; set when inserted on its own
    tool_message_id: int | None = None  # the card's tool row; likewise
    decision_id: int | None = None  # the carrier, if one was created
    due_from: datetime | None = None  # where its due clock started (the service's now)


@dataclass(frozen=True, slots=True)
class StoredResult(Row):
    """A tool row already written for a call (a retry replays it)."""

    id: int
    content: object  # a tool result: any JSON value
    source_meta: dict[str, object] | None


@dataclass(frozen=True, slots=True)
class PostedCall:
    """A tool call as the assistant row that carries it holds it, with that row's ids."""

    call: dict[str, object]  # {"id", "name", "arguments", …} as the model sent it
    message_id: int
    turn_id: int | None
