"""A transition's consequences: one set-wise function per ``Effect`` (``components/machine.py``).

Every path that moves cards — Max's answer (one question or a whole card), Main's answer, the
hand-off to Main, hand-back, revoke, withdraw and supersede, the due, unwatched and expiry
sweeps, a push action — calls ``run`` with the transition's row and the components it moved,
inside the transaction of the move. ``run`` calls, in the table's order, the function of each
of the row's effects with the whole list, so one card and a sweep's batch of thousands go
through the same code. To add a consequence: a member of ``Effect``, its function here, and
the member in the rows of the table that imply it (``docs/architecture.md``).

The one exception is speed: a plain answer (no secret, no guard) runs as one statement,
``store.ANSWER_SETTLE``, which fuses the CAS with ``answer_message`` and ``settle_carrier``
below. ``tests/integration/test_effects_equivalence.py`` runs the same answers both ways and
compares every row written.

Lock order, as every path takes it: the components, the tool rows (ascending), the carriers,
then messages and the woken threads' turns (in thread id order, set-wise).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from maxclaw.cards.definitions import ComponentDefinition
from maxclaw.cards.rules import main_may_take
from maxclaw.cards.text import (
    EXCERPT_ROW_CHARS,
    EXCERPT_ROWS,
    answer_message_text,
    answer_meta,
    card_answer_meta,
    card_answer_text,
    expired_text,
    handed_back_push_body,
    handed_back_text,
    handed_text,
    handoff_meta,
    handoff_text,
    main_answered_push_body,
    main_answered_text,
    main_timed_out_text,
    max_answered_text,
    revoke_text,
    withdrawn_line,
    withdrawn_text,
)
from maxclaw.components import main_store, retract_store, store
from maxclaw.components.machine import Actor, Effect, Status, Surface, Transition
from maxclaw.components.projections import card_of, thread_of
from maxclaw.components.rows import ComponentInContext, ComponentRow
from maxclaw.decisions import carriers
from maxclaw.secrets.mask import mask_token
from maxclaw.secrets.service import SecretService
from maxclaw.timefmt import rfc3339
from maxclaw.timeline import store as timeline_store
from maxclaw.timeline.rows import InputRow

SECRET_LINE = "Submitted (not echoed)"
EXPIRED_LINE = "Expired unanswered"  # the carrier's line when its card expired


@dataclass
class Moved:
    """One component a transition moved, with what its effects read.

    ``context`` is the component as loaded with its card and thread (the effects that name the
    thread's title or kind need it; an answer's effects need the component only). ``answer`` is
    the validated answer as given (a secret in clear, sealed by ``answer_message``), ``via`` the
    surface it came from, ``note`` Main's hand-back note. ``decision_id`` is updated by
    ``ensure_carrier`` for the effects after it."""

    user_id: str
    id: str
    thread_id: str
    from_status: str
    decision_id: int | None
    definition: ComponentDefinition
    context: ComponentInContext | None = None
    main_reason: str | None = None
    withdrawn_reason: str | None = None
    superseded_by: str | None = None
    answer: dict[str, Any] | None = None
    via: str | None = None
    note: str | None = None
    at: datetime | None = None  # when the move happened, where an effect writes a time

    @classmethod
    def of(cls, new: ComponentRow, from_status: str, definition: ComponentDefinition,
           context: ComponentInContext | None = None, **extra: Any) -> Moved:
        """The component as its move left it (``new``), from ``from_status``."""
        return cls(user_id=new.user_id, id=new.id, thread_id=new.thread_id,
                   from_status=from_status, decision_id=new.decision_id,
                   definition=definition, context=context, main_reason=new.main_reason,
                   withdrawn_reason=new.withdrawn_reason, superseded_by=new.superseded_by,
                   **extra)

    @property
    def in_context(self) -> ComponentInContext:
        assert self.context is not None, f"{self.id}: moved without its context"
        return self.context


EffectFn = Callable[[asyncpg.Connection, Transition, list[Moved], SecretService],
                    Awaitable[None]]


async def run(conn: asyncpg.Connection, t: Transition, moved: list[Moved],
              secrets: SecretService) -> list[Moved]:
    """Every consequence of row ``t`` for the components it ``moved``, in the table's order
    (beyond the CAS, the mirror and the audit, which the move writes); returns ``moved``
    with what the effects linked to them (a carrier's id)."""
    if moved:
        for effect in t.effects:
            await EFFECTS[effect](conn, t, moved, secrets)
    return moved


async def answer_message(conn: asyncpg.Connection, t: Transition, moved: list[Moved],
                         secrets: SecretService) -> None:
    """``ANSWER_MESSAGE``: the answer as Max's message in the asking thread, which it wakes.
    Several answers (one card answered whole) make one message with a block per question; one
    reads as a single answer. A secret's row holds a masked body; the full one is sealed."""
    if len(moved) == 1:
        await _one_answer(conn, t, moved[0], secrets)
    else:
        await _card_answer(conn, moved, secrets)


async def _one_answer(conn: asyncpg.Connection, t: Transition, m: Moved,
                      secrets: SecretService) -> None:
    assert m.answer is not None and m.via is not None
    definition, by_main = m.definition, t.actor is Actor.MAIN
    body = answer_message_text(definition, m.answer, by_main=by_main)
    sealed = None
    if definition.sensitive:
        sealed = secrets.seal_answer(m.user_id, m.thread_id, definition.id,
                                     str(m.answer.get("text") or ""), body)
        body = answer_message_text(definition, {**m.answer, "text": mask_token(definition.id)},
                                   by_main=by_main)
    await timeline_store.insert_input_and_wake(
        conn, user_id=m.user_id, thread_id=m.thread_id, role="user", body=body, secret=sealed,
        display={"line": SECRET_LINE} if definition.sensitive else None,
        source_meta=answer_meta(definition, m.answer, by_main=by_main, via=m.via),
        sensitive=definition.sensitive)


async def _card_answer(conn: asyncpg.Connection, moved: list[Moved],
                       secrets: SecretService) -> None:
    first = moved[0]
    tool_call_id = first.id.rsplit(":", 1)[0]
    assert all(m.id.rsplit(":", 1)[0] == tool_call_id for m in moved), "one card per message"
    pairs = [(m.definition, m.answer or {}) for m in moved]
    body = card_answer_text(pairs)
    hidden = [(str(a.get("text") or ""), d.id) for d, a in pairs if d.sensitive]
    sealed = None
    if hidden:
        sealed = secrets.seal_card_answer(first.user_id, first.thread_id, hidden, body)
        body = card_answer_text([(d, {**a, "text": mask_token(d.id)} if d.sensitive else a)
                                 for d, a in pairs])
    await timeline_store.insert_input_and_wake(
        conn, user_id=first.user_id, thread_id=first.thread_id, role="user", body=body,
        secret=sealed, display={"line": SECRET_LINE} if hidden else None,
        source_meta=card_answer_meta(tool_call_id, pairs, first.via or Surface.CARD.value),
        sensitive=bool(hidden))


async def settle_carrier(conn: asyncpg.Connection, t: Transition, moved: list[Moved],
                         secrets: SecretService) -> None:
    """``SETTLE_CARRIER``: each carrier settled with its card's answer; pushes withdrawn."""
    for m in moved:
        assert m.answer is not None and m.via is not None
        await carriers.settle_carrier(conn, m.user_id, m.decision_id, m.definition, m.answer,
                                      m.via)


async def ensure_carrier(conn: asyncpg.Connection, t: Transition, moved: list[Moved],
                         secrets: SecretService) -> None:
    """``ENSURE_CARRIER``: a carrier (and its push) for each card without one, so the panel
    and push can answer it (even while Main holds it), linked to the card."""
    missing = [m for m in moved if m.decision_id is None]
    ids = await carriers.ensure_carriers(conn, [
        (m.user_id, m.definition, thread_of(m.in_context)) for m in missing])
    if ids:
        await store.set_decisions(conn, ids)
    for m in missing:
        m.decision_id = ids.get((m.user_id, m.id))


async def handoff_message(conn: asyncpg.Connection, t: Transition, moved: list[Moved],
                          secrets: SecretService) -> None:
    """``HANDOFF_MESSAGE``: the question as a message in its user's Main thread, woken, with
    an excerpt of the asking thread up to the question (one read for the whole batch), so a
    Main that never calls read_thread still sees why it was asked."""
    mains = await timeline_store.main_thread_ids(conn, sorted({m.user_id for m in moved}))
    keys = [(m.user_id, m.thread_id, m.in_context.message_id) for m in moved]
    unique = list(dict.fromkeys(keys))  # the questions of one card share their excerpt
    read = dict(zip(unique, await main_store.excerpts(conn, unique, EXCERPT_ROWS,
                                                      EXCERPT_ROW_CHARS), strict=True))
    await timeline_store.insert_inputs_and_wake(conn, [
        InputRow(user_id=m.user_id, thread_id=mains[m.user_id], role="user",
                 body=handoff_text(m.definition, m.in_context.thread_title, m.thread_id,
                                   read[key]),
                 source_meta=handoff_meta(m.definition, m.thread_id, phase=t.target.value))
        for m, key in zip(moved, keys, strict=True)])


async def reopen_carrier(conn: asyncpg.Connection, t: Transition, moved: list[Moved],
                         secrets: SecretService) -> None:
    """``REOPEN_CARRIER``: each carrier reopened through its kind's reverter (pushed again)."""
    for m in moved:
        await carriers.revert(conn, m.user_id, m.decision_id, m.in_context.thread_title)


async def revoke_event(conn: asyncpg.Connection, t: Transition, moved: list[Moved],
                       secrets: SecretService) -> None:
    """``REVOKE_EVENT``: an event in each asking thread (Main's answer was revoked); wakes."""
    await timeline_store.insert_inputs_and_wake(conn, [
        InputRow(user_id=m.user_id, thread_id=m.thread_id, role="event",
                 body=revoke_text(m.definition),
                 source_meta={"askHandoff": {"componentId": m.id, "phase": t.target.value}})
        for m in moved])


def _end_line(t: Transition, m: Moved) -> str:
    if t.target is Status.EXPIRED:
        return EXPIRED_LINE
    return withdrawn_line(m.withdrawn_reason or "", m.superseded_by)


async def withdraw_carrier(conn: asyncpg.Connection, t: Transition, moved: list[Moved],
                           secrets: SecretService) -> None:
    """``WITHDRAW_CARRIER``: each carrier settled without an answer (withdrawn or expired, the
    line the panel shows); its pushes withdrawn."""
    for m in moved:
        await carriers.end_carrier(conn, m.user_id, m.decision_id, _end_line(t, m),
                                   t.target.value)


def _why_ended(t: Transition, m: Moved) -> str:
    if m.withdrawn_reason:
        return m.withdrawn_reason
    return "it expired" if t.target is Status.EXPIRED else t.target.value


def _told_main(t: Transition, m: Moved) -> str:
    """What Main's thread reads when a card it held is no longer its to decide."""
    if t.target is Status.ANSWERED:  # Max answered it (the panel or a push)
        return max_answered_text(m.definition)
    if t.target is Status.HANDED_BACK:  # its time to decide ran out (the main-timeout sweep)
        return main_timed_out_text(m.definition, m.note or "")
    return withdrawn_text(m.definition, _why_ended(t, m))


async def tell_main(conn: asyncpg.Connection, t: Transition, moved: list[Moved],
                    secrets: SecretService) -> None:
    """``TELL_MAIN``: for each card Main held, an event in Main's thread saying it is no
    longer Main's to decide (``source_meta.askHandoff.phase``: the card's new status). It does
    not wake Main: a turn of Main's working now reads it at its next step (its inbox); an idle
    Main reads it as history on its next turn (``timeline.store.INSERT_NOTICES``)."""
    held = [m for m in moved if m.from_status == Status.WITH_MAIN]
    if not held:
        return
    mains = await timeline_store.main_thread_ids(conn, sorted({m.user_id for m in held}))
    await timeline_store.insert_notices(conn, [
        timeline_store.NewEvent(m.user_id, mains[m.user_id], _told_main(t, m),
                                {"askHandoff": {"componentId": m.id, "threadId": m.thread_id,
                                                "phase": t.target.value}})
        for m in held])


async def expiry_event(conn: asyncpg.Connection, t: Transition, moved: list[Moved],
                       secrets: SecretService) -> None:
    """``EXPIRY_EVENT``: an event in each asking thread ('expired unanswered'); wakes it. Its
    ``source_meta.askExpired`` names the card (docs/api.md)."""
    await timeline_store.insert_inputs_and_wake(conn, [
        InputRow(user_id=m.user_id, thread_id=m.thread_id, role="event",
                 body=expired_text(m.definition),
                 source_meta={"askExpired": {"componentId": m.id}})
        for m in moved])


def origin_text(target: Status, m: Moved) -> str:
    """The asking thread's history line for where its question went (``ORIGIN_EVENT``)."""
    if target is Status.MAIN_ANSWERED:
        assert m.answer is not None
        return main_answered_text(m.definition, m.answer, m.main_reason)
    if target is Status.HANDED_BACK:
        return handed_back_text(m.definition)
    return handed_text(m.definition)


async def origin_event(conn: asyncpg.Connection, t: Transition, moved: list[Moved],
                       secrets: SecretService) -> None:
    """``ORIGIN_EVENT``: history only — a row in each asking thread saying where its question
    went; it waits there and is read with the thread's next input (it does not wake it)."""
    await timeline_store.insert_events(conn, [
        timeline_store.NewEvent(m.user_id, m.thread_id, origin_text(t.target, m),
                                {"askHandoff": {"componentId": m.id, "phase": t.target.value,
                                                "wakes": False}})
        for m in moved])


async def tell_max(conn: asyncpg.Connection, t: Transition, moved: list[Moved],
                   secrets: SecretService) -> None:
    """``TELL_MAX``: a push to Max's devices saying what Main did (after the carrier's
    settlement in the table's order, so per device the question's withdraw goes first)."""
    for m in moved:
        title = m.in_context.thread_title
        if t.target is Status.MAIN_ANSWERED:
            assert m.answer is not None
            await carriers.tell_main_answered(
                conn, m.user_id, m.decision_id, title,
                main_answered_push_body(m.definition, m.answer),
                None if m.definition.sensitive else m.main_reason)
        else:
            await carriers.tell_handed_back(conn, m.user_id, m.decision_id, title,
                                            handed_back_push_body(m.definition, m.note), m.note)


async def withdraw_answer(conn: asyncpg.Connection, t: Transition, moved: list[Moved],
                          secrets: SecretService) -> None:
    """``WITHDRAW_ANSWER``: each answer message taken back — out of the thread's undelivered
    input, marked ``source_meta.retracted`` (the timeline shows "taken back", the model window
    leaves it out), its sealed box destroyed — and each thread's wake-up that has not started
    closed when no other input waits for it. The retract locked the message and checked it
    undelivered first (``retract_store``'s lock order)."""
    at = _at(moved)
    await retract_store.withdraw_answers(conn, [(m.user_id, m.thread_id, m.id) for m in moved],
                                         at)
    threads = list(dict.fromkeys((m.user_id, m.thread_id) for m in moved))
    await retract_store.cancel_idle_wake(conn, threads, at)


async def redue(conn: asyncpg.Connection, t: Transition, moved: list[Moved],
                secrets: SecretService) -> None:
    """``REDUE``: each reopened card's due moment counted again from now (its
    ``main_after_minutes``; none: never to Main by time), mirrored with ``main_may_take``."""
    at = _at(moved)
    for m in moved:
        card = card_of(m.in_context)
        due = (None if card.main_after_minutes is None
               else at + timedelta(minutes=card.main_after_minutes))
        await retract_store.redue(conn, m.user_id, m.id, due,
                                  rfc3339(due) if due is not None else None,
                                  main_may_take(card, thread_of(m.in_context)))


def _at(moved: list[Moved]) -> datetime:
    at = moved[0].at
    assert at is not None, "a retract's effects are given the moment it happened"
    return at


EFFECTS: dict[Effect, EffectFn] = {
    Effect.ANSWER_MESSAGE: answer_message,
    Effect.SETTLE_CARRIER: settle_carrier,
    Effect.ENSURE_CARRIER: ensure_carrier,
    Effect.HANDOFF_MESSAGE: handoff_message,
    Effect.REOPEN_CARRIER: reopen_carrier,
    Effect.REVOKE_EVENT: revoke_event,
    Effect.WITHDRAW_CARRIER: withdraw_carrier,
    Effect.TELL_MAIN: tell_main,
    Effect.EXPIRY_EVENT: expiry_event,
    Effect.ORIGIN_EVENT: origin_event,
    Effect.TELL_MAX: tell_max,
    Effect.WITHDRAW_ANSWER: withdraw_answer,
    Effect.REDUE: redue,
}
assert set(EFFECTS) == set(Effect), "every Effect has its one function"


def with_decision(row: ComponentRow, m: Moved) -> ComponentRow:
    """``row`` with the carrier the effects linked to it."""
    return row if row.decision_id == m.decision_id else replace(row, decision_id=m.decision_id)
