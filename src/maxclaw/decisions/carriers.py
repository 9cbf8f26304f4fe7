"""Carriers: the decisions that carry a card to the panel, push notifications and the nudge bar.

Functions taking a connection, called by the card's effects (``components/effects.py``) inside
the transaction of the card's own transition, so card and carrier never disagree and the push
outbox row commits with them. They know nothing of cards' transitions: components calls down
into them, never the other way.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import asyncpg

from maxclaw.cards.answers import answer_summary
from maxclaw.cards.definitions import ComponentDefinition
from maxclaw.cards.rules import ThreadFacts
from maxclaw.decisions import store
from maxclaw.decisions.projections import decision_fields
from maxclaw.decisions.rows import DecisionRow, NewCarrier
from maxclaw.errors import ComponentError
from maxclaw.push import action_token_store, outbox
from maxclaw.push.payload import build_payload


def _carrier_options(definition: ComponentDefinition) -> list[dict[str, object]]:
    if definition.kind == "object":
        return [{"id": a.id, "label": a.label, "recommended": False} for a in definition.actions]
    return [o.model_dump() for o in definition.options]


async def ensure_carrier(conn: asyncpg.Connection, user_id: str, definition: ComponentDefinition,
                         thread: ThreadFacts) -> DecisionRow:
    """The component's ``agent-question`` decision, created (and pushed) if it did not exist."""
    row = _carrier_row(user_id, definition, thread)
    created = await store.insert_carrier(
        conn, user_id, component_id=definition.id, thread_id=row.thread_id, title=row.title,
        body=row.body, options=row.options, allow_text=row.allow_text, sensitive=row.sensitive,
        bar=row.bar)
    if created is not None:
        await outbox.enqueue_notification(
            conn, user_id=user_id,
            decision={**decision_fields(created), "urgency": definition.urgency,
                      "multiple": definition.multiple},
            thread_title=thread.title)
        return created
    existing = await store.by_dedupe(conn, user_id, f"ask:{definition.id}")
    assert existing is not None  # the conflict that stopped the insert is this row
    return existing


def _carrier_row(user_id: str, definition: ComponentDefinition,
                 thread: ThreadFacts) -> NewCarrier:
    return NewCarrier(
        user_id=user_id, component_id=definition.id, thread_id=thread.id,
        title=definition.title, body=definition.question,
        options=_carrier_options(definition),
        allow_text=definition.kind in ("text", "secret") or definition.allow_other,
        sensitive=definition.sensitive, bar=thread.kind == "main")


def carrier_rows(user_id: str, definitions: list[ComponentDefinition],
                 thread: ThreadFacts) -> list[NewCarrier]:
    """The carriers ``ensure_carriers`` would create for these questions, with each one's push
    payload (its ``decision_id`` 0, filled in by the statement that inserts the carrier)."""
    rows = []
    for definition in definitions:
        row = _carrier_row(user_id, definition, thread)
        fields = {"user_id": row.user_id, "component_id": row.component_id,
                  "thread_id": row.thread_id, "title": row.title, "body": row.body,
                  "options": row.options, "allow_text": row.allow_text,
                  "sensitive": row.sensitive, "bar": row.bar, "id": 0,
                  "urgency": definition.urgency, "multiple": definition.multiple}
        rows.append(replace(row, payload=build_payload(fields, thread.title)))
    return rows


async def ensure_carriers(
    conn: asyncpg.Connection, items: list[tuple[str, ComponentDefinition, ThreadFacts]],
) -> dict[tuple[str, str], int]:
    """``ensure_carrier`` for a batch of ``(user_id, definition, thread)``, set-wise: the
    missing decisions are created (and pushed) in one statement each. Returns
    ``{(user_id, component_id): decision_id}`` for every item (component ids are unique per
    user only)."""
    if not items:
        return {}
    created = await store.insert_carriers(conn, [_carrier_row(*item) for item in items])
    titles = {(u, d.id): thread.title for u, d, thread in items}
    urgency = {(u, d.id): d.urgency for u, d, _ in items}
    multiple = {(u, d.id): d.multiple for u, d, _ in items}
    await outbox.enqueue_notifications(
        conn, [({**decision_fields(c), "urgency": urgency[(c.user_id, str(c.component_id))],
                 "multiple": multiple[(c.user_id, str(c.component_id))]},
                titles[(c.user_id, str(c.component_id))]) for c in created])
    ids = {(c.user_id, str(c.component_id)): c.id for c in created}
    missing = [(u, d.id) for u, d, _ in items if (u, d.id) not in ids]
    if missing:
        ids |= await store.ids_by_component(conn, missing)
    return ids


async def settle_carrier(conn: asyncpg.Connection, user_id: str, decision_id: int | None,
                         definition: ComponentDefinition, answer: dict[str, Any],
                         via: str) -> None:
    """Settle the card's carrier with the card's answer and withdraw its notifications."""
    if decision_id is None:
        return
    settled = await store.settle(conn, user_id, decision_id, answer_summary(definition, answer),
                                 via)
    if settled is not None:
        await outbox.enqueue_withdraw(conn, user_id=user_id, decision=decision_fields(settled))


async def end_carrier(conn: asyncpg.Connection, user_id: str, decision_id: int | None,
                      line: str, via: str) -> None:
    """Settle the card's carrier without an answer (``via`` ``withdrawn`` or ``expired``,
    ``line`` what the panel shows) and withdraw its notifications."""
    if decision_id is None:
        return
    settled = await store.settle(conn, user_id, decision_id, line, via)
    if settled is not None:
        await outbox.enqueue_withdraw(conn, user_id=user_id, decision=decision_fields(settled))


async def tell_main_answered(conn: asyncpg.Connection, user_id: str, decision_id: int | None,
                             thread_title: str, body: str, reason: str | None) -> None:
    """Push "Main answered … for you" (Why? / Revoke) for a carrier Main's answer settled."""
    decision = None if decision_id is None else await store.get(conn, user_id, decision_id)
    if decision is not None:
        await outbox.enqueue_main_answered(conn, user_id=user_id,
                                           decision=decision_fields(decision),
                                           thread_title=thread_title, body=body, reason=reason)


async def tell_handed_back(conn: asyncpg.Connection, user_id: str, decision_id: int | None,
                           thread_title: str, body: str, note: str | None) -> None:
    """Push the question again, led by Main's note, when Main hands it back (its carrier is
    still open: the buttons answer it)."""
    decision = None if decision_id is None else await store.get(conn, user_id, decision_id)
    if decision is not None and decision.status == "open":
        await outbox.enqueue_handed_back(conn, user_id=user_id,
                                         decision=decision_fields(decision),
                                         thread_title=thread_title, body=body, note=note)


async def _reopen_agent_question(conn: asyncpg.Connection, user_id: str,
                                 decision: DecisionRow, thread_title: str) -> None:
    reopened = await store.reopen(conn, user_id, decision.id)
    if reopened is not None:
        # notifications sent before the reopen must not answer the reopened question
        await action_token_store.revoke_for_decision(conn, user_id=user_id,
                                                     decision_id=decision.id)
        await outbox.enqueue_notification(conn, user_id=user_id,
                                          decision=decision_fields(reopened),
                                          thread_title=thread_title)


Reverter = Callable[[asyncpg.Connection, str, DecisionRow, str], Awaitable[None]]
# How a settled decision of each kind is reopened (Main's revoke uses agent-question's).
REVERTERS: dict[str, Reverter] = {"agent-question": _reopen_agent_question}


async def revert(conn: asyncpg.Connection, user_id: str, decision_id: int | None,
                 thread_title: str) -> None:
    """Reopen a settled decision through its kind's reverter."""
    if decision_id is None:
        return
    decision = await store.get(conn, user_id, decision_id)
    if decision is None:
        return
    reverter = REVERTERS.get(decision.kind)
    if reverter is None:
        raise ComponentError("conflict", f"decisions of kind {decision.kind!r} cannot reopen")
    await reverter(conn, user_id, decision, thread_title)
