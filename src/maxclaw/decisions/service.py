"""The decisions queue: carriers of cards to the panel, push notifications and the nudge bar.

Two kinds of functions live here:
- carrier functions taking a connection (``ensure_carrier``, ``settle_carrier``, ``revert``),
  called by ``ComponentService`` inside the transaction of the card's own transition, so card and
  carrier never disagree and the push outbox row commits with them;
- ``DecisionService``, the panel's entry points; settling goes back through
  ``ComponentService.answer`` (``settle_from_carrier``), so whichever surface is first counts once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any, Protocol

import asyncpg

from maxclaw.auth.service import Principal, parse_int_id
from maxclaw.cards.answers import answer_summary
from maxclaw.cards.definitions import ComponentDefinition
from maxclaw.cards.rules import ThreadFacts
from maxclaw.clock import Clock
from maxclaw.db.database import Database
from maxclaw.decisions import store
from maxclaw.decisions.projections import decision_fields, decision_projection
from maxclaw.decisions.rows import DecisionRow, NewCarrier
from maxclaw.errors import ComponentError, Invalid, NotFound
from maxclaw.push import action_token_store, outbox
from maxclaw.push.payload import build_payload
from maxclaw.timeline.service import check_limit


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
        await outbox.enqueue_notification(conn, user_id=user_id,
                                          decision=decision_fields(created),
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
                  "sensitive": row.sensitive, "bar": row.bar, "id": 0}
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
    await outbox.enqueue_notifications(
        conn, [(decision_fields(c), titles[(c.user_id, str(c.component_id))])
               for c in created])
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


# Runs inside an answer's transaction before the card changes; raising rolls the answer back
# (a push action token is spent this way, so a refused answer leaves the token unused).
AnswerGuard = Callable[[asyncpg.Connection], Awaitable[None]]


class Answerer(Protocol):
    async def answer(self, who: Principal, component_id: str, selected: Any, text: Any,
                     via: str, guard: AnswerGuard | None = None) -> dict[str, Any]: ...

    async def revoke(self, who: Principal, component_id: str, via: str = ...,
                     guard: AnswerGuard | None = None) -> dict[str, Any]: ...


class DecisionService:
    """The decisions panel: list, settle (through the card), revoke Main's answer (through
    the card), dismiss, snooze the nudge bar."""

    def __init__(self, db: Database, clock: Clock, components: Answerer) -> None:
        self.db = db
        self.clock = clock
        self.components = components

    async def list(self, who: Principal, status: str = "open",
                   limit: int = 100) -> list[dict[str, Any]]:
        """The user's decisions, newest first: ``open``, ``panel`` (open, and Main's answers
        not dismissed yet) or ``all``."""
        if status not in ("open", "panel", "all"):
            raise Invalid.at(["query", "status"], "status must be 'open', 'panel' or 'all'")
        async with self.db.connection() as conn:
            rows = await store.list_decisions(conn, who.user_id, status, check_limit(limit))
        return [decision_projection(r) for r in rows]

    async def get(self, who: Principal, decision_id: int | str) -> dict[str, Any]:
        """One of the user's decisions, or 404."""
        async with self.db.connection() as conn:
            row = await store.get(conn, who.user_id, parse_int_id(decision_id, "decision"))
        if row is None:
            raise NotFound("No such decision.")
        return decision_projection(row)

    async def settle(self, who: Principal, decision_id: int | str, selected: Any, text: Any,
                     via: str = "decision", guard: AnswerGuard | None = None) -> dict[str, Any]:
        """settle_from_carrier: answer the card the decision carries, then show the decision."""
        decision = await self.get(who, decision_id)
        if decision["kind"] != "agent-question" or decision["component_id"] is None:
            raise Invalid.at(["decision_id"], "this decision does not carry a question card")
        if decision["status"] == "settled":
            # a withdrawn or expired question says so, from every surface
            ended = decision["settled_via"]
            raise ComponentError(ended if ended in ("withdrawn", "expired") else "settled")
        await self.components.answer(who, decision["component_id"], selected, text, via,
                                     guard=guard)
        return await self.get(who, decision_id)

    async def revoke(self, who: Principal, decision_id: int | str, via: str = "push",
                     guard: AnswerGuard | None = None) -> dict[str, Any]:
        """Revoke Main's answer to the question this decision carries (the Revoke button of
        "Main answered … for you"), then show the decision (open again)."""
        decision = await self.get(who, decision_id)
        if decision["kind"] != "agent-question" or decision["component_id"] is None:
            raise Invalid.at(["decision_id"], "this decision does not carry a question card")
        await self.components.revoke(who, decision["component_id"], via=via, guard=guard)
        return await self.get(who, decision_id)

    async def dismiss(self, who: Principal, decision_id: int | str) -> dict[str, Any]:
        """Max removes a settled item from the panel (an answer by Main he accepts);
        idempotent. An open decision is refused: answer it (or let Main decide) first. The
        "Main answered" notification of a dismissed item is withdrawn."""
        numeric = parse_int_id(decision_id, "decision")
        async with self.db.transaction() as conn:
            row = await store.dismiss(conn, who.user_id, numeric, self.clock.now())
            if row is None:
                row = await store.get(conn, who.user_id, numeric)
                if row is None:
                    raise NotFound("No such decision.")
                if row.status == "open":
                    raise ComponentError("conflict", "This question is still open: answer it "
                                         "(or let Main decide) before dismissing it.",
                                         data={"status": "open"})
            elif row.settled_via == "main":
                await outbox.enqueue_withdraw(conn, user_id=who.user_id,
                                              decision=decision_fields(row))
        return decision_projection(row)

    async def snooze(self, who: Principal, decision_id: int | str,
                     minutes: Any) -> dict[str, Any]:
        """Hide Main's nudge bar for this decision for ``minutes``."""
        if isinstance(minutes, bool) or not isinstance(minutes, int) or not 1 <= minutes <= 10080:
            raise Invalid.at(["body", "minutes"], "minutes must be an integer from 1 to 10080")
        until = self.clock.now() + timedelta(minutes=minutes)
        async with self.db.transaction() as conn:
            row = await store.snooze(conn, who.user_id, parse_int_id(decision_id, "decision"),
                                     until)
        if row is None:
            raise NotFound("No such decision.")
        return decision_projection(row)
