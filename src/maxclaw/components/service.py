"""ComponentService: where a question becomes a card and an answer becomes a message.

Each public method is one transaction around one row of the transitions table
(``components/machine.py``):
1. ``_move``: the CAS on ``message_components`` from the row's from-states, the mirror into the
   tool row's ``display.states`` (the rev trigger syncs every client) and the audit row, in one
   statement (``store.TRANSITION``); no row back: another surface won → ``ComponentError``
   with the row's refusal code, and nothing else is written;
2. ``_effects``: the row's consequences, in the table's order — the answer message and the
   thread's wake-up, the carrier's settlement and its push withdrawal, the hand-off to Main,
   the revoke event. The due sweep runs the same rows set-wise (``_sweep_writes``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from maxclaw.auth.service import Principal
from maxclaw.cards.answers import (
    answer_summary,
    stored_answer,
    validate_answer,
    validate_card_answers,
)
from maxclaw.cards.definitions import Card, ComponentDefinition, components_of_tool_call
from maxclaw.cards.rules import ThreadFacts, main_may_take
from maxclaw.cards.text import (
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
    revoke_text,
    withdrawn_line,
    withdrawn_text,
)
from maxclaw.clock import Clock
from maxclaw.components import store
from maxclaw.components.machine import (
    UNSETTLED,
    Effect,
    Status,
    Surface,
    Transition,
    answerable,
    answerable_here,
    may_hand_to_main,
    statuses,
    transition,
)
from maxclaw.components.rows import (
    CardComponentRow,
    ComponentInContext,
    ComponentRow,
    MovedComponent,
    NewComponent,
    SweptComponent,
)
from maxclaw.db.database import Database
from maxclaw.decisions import service as carriers
from maxclaw.errors import ComponentError, Invalid, NotFound, Unavailable
from maxclaw.metrics import Metrics
from maxclaw.presence import store as presence_store
from maxclaw.push.payload import collapse_id, withdraw_payload
from maxclaw.secrets.mask import mask_token
from maxclaw.secrets.service import SecretService
from maxclaw.timefmt import rfc3339_or_none
from maxclaw.timeline import store as timeline_store
from maxclaw.timeline.rows import InputRow, MessageRow, ThreadRow

WATCHED_DUE = timedelta(hours=1)
# Builds a posted card's tool-row content from its components' due time (None: never to Main
# by time); the caller owns the wording (server_tools), the service the due time.
ContentFor = Callable[[datetime | None], dict[str, Any]]
# Max answers from these states (the transitions table's ``answer`` rows): the card itself is
# locked while Main holds it, the panel and push are not.
ANSWERABLE = {s.value: statuses(answerable(s)) for s in (Surface.CARD, Surface.DECISION,
                                                         Surface.PUSH)}
CARD_ANSWERABLE = ANSWERABLE[Surface.CARD.value]
SWEEP_TO_MAIN = transition("to-main", Surface.SWEEP)
SWEEP_KEEP = transition("keep-open", Surface.SWEEP)
SWEEP_EXPIRE = transition("expire", Surface.SWEEP)
SWEEP_UNWATCHED = transition("unwatched", Surface.SWEEP)
DEFINITION_CACHE_SIZE = 50_000
# a plain answer's statement runs again when the card moved after its snapshot; each try sees
# one more concurrent move, so a few tries only lose to a card moved again and again
ANSWER_SNAPSHOT_TRIES = 4
SECRET_LINE = "Submitted (not echoed)"
MAX_NOTE_CHARS = 2000  # Main's hand-back note, as long as a question may be


def state_of(row: ComponentRow | SweptComponent, rule: bool = False) -> dict[str, object]:
    """A component's entry in ``display.states`` (the answer is already secret-safe), with what
    a client draws from it: ``answerable_here`` (the card takes Max's answer now) and
    ``main_may_take`` ("let Main decide" is offered now; ``rule`` is ``rules.main_may_take``)."""
    # (the due sweep's rows carry these columns too: its mirror once wrote expires_at as null,
    # so a swept card with an expiry stopped showing it)
    return {"status": row.status, "answered_by": row.answered_by,
            "answered_via": row.answered_via, "answer": row.answer,
            "due_at": rfc3339_or_none(row.due_at),
            "expires_at": rfc3339_or_none(row.expires_at),
            "answerable_here": answerable_here(row.status),
            "main_may_take": may_hand_to_main(row.status, rule),
            "withdrawn_reason": row.withdrawn_reason, "superseded_by": row.superseded_by,
            "seen_at": rfc3339_or_none(row.seen_at)}


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


def _origin_text(target: Status, definition: ComponentDefinition,
                 answer: dict[str, Any] | None, reason: str | None) -> str:
    """The asking thread's history line for where its question went (``ORIGIN_EVENT``)."""
    if target is Status.MAIN_ANSWERED:
        assert answer is not None
        return main_answered_text(definition, answer, reason)
    if target is Status.HANDED_BACK:
        return handed_back_text(definition)
    return handed_text(definition)


def _origin_meta(component_id: str, target: Status) -> dict[str, Any]:
    return {"askHandoff": {"componentId": component_id, "phase": target.value,
                           "wakes": False}}


def _key(row: ComponentRow) -> store.Key:
    return (row.user_id, row.id)


def _thread(row: ComponentInContext) -> ThreadFacts:
    """The card's thread as ``rules.main_may_take`` and the carriers read it."""
    return ThreadFacts(row.thread_id, row.thread_kind, row.category, row.thread_title)


def thread_facts(thread: ThreadRow) -> ThreadFacts:
    """``_thread`` of a thread row (a card being posted)."""
    return ThreadFacts(thread.id, thread.kind, thread.category, thread.title)


def _in_context(row: ComponentRow) -> ComponentInContext:
    """``row`` as loaded with its context: the effects that name the card's thread are only
    in transitions that start from ``_load`` (an answer's effects need the component only)."""
    assert isinstance(row, ComponentInContext), f"{row.id}: moved without its context"
    return row


class ComponentService:
    """Cards: post, answer, hand to Main and back, revoke, sweep."""

    def __init__(self, db: Database, clock: Clock, metrics: Metrics,
                 secrets: SecretService) -> None:
        self.db = db
        self.clock = clock
        self.metrics = metrics
        self.secrets = secrets
        self._definitions: dict[tuple[str, str], ComponentDefinition] = {}

    # ----- reading -----

    async def _load(self, conn: asyncpg.Connection, user_id: str,
                    component_id: str) -> ComponentInContext:
        row = await store.get_with_context(conn, user_id, component_id)
        if row is None:
            raise NotFound("No such component.")
        return row

    async def get(self, who: Principal, component_id: str) -> dict[str, Any]:
        """One component with its definition and state."""
        async with self.db.connection() as conn:
            row = await self._load(conn, who.user_id, component_id)
        who.check_thread(row.thread_id)
        card = card_of(row)
        return component_projection(row, card.component(component_id),
                                    main_may_take(card, _thread(row)))

    # ----- posting (ask_user_question) -----

    async def post_card(self, conn: asyncpg.Connection, *, user_id: str, thread: ThreadRow,
                        card: Card, assistant_message_id: int, turn_id: int | None,
                        content_for: ContentFor, watching: bool | None = None) -> MessageRow:
        """Create a card's rows inside the caller's transaction; returns the tool row.

        ``content_for(due_ats)`` builds the tool row's content from the components' due times.
        Due time: one hour if Max is watching the thread (no carrier), else
        ``main_after_minutes`` (and a carrier, which pushes). ``watching``: when the caller
        read it already (in the same transaction); None reads it here.
        """
        if watching is None:
            watching = await presence_store.is_watching(conn, user_id, thread.id,
                                                        self.clock.now())
        plan = self.card_rows(user_id, thread, card, watching, content_for)
        tool_row = await timeline_store.insert_message(
            conn, user_id=user_id, thread_id=thread.id, role="tool",
            tool_call_id=card.tool_call_id, content=plan.content, display=plan.display,
            source_meta=store.ASK_TOOL_META, turn_id=turn_id)
        # the carriers (and their pushes) of every question in two statements, however many
        facts = thread_facts(thread)
        decision_ids = {} if watching else await carriers.ensure_carriers(
            conn, [(user_id, c, facts) for c in card.components])
        await store.insert_components(conn, [
            replace(row, message_id=assistant_message_id, tool_message_id=tool_row.id,
                    decision_id=decision_ids.get((user_id, row.id)))
            for row in plan.components])
        return tool_row

    def card_rows(self, user_id: str, thread: ThreadRow, card: Card, watching: bool,
                  content_for: ContentFor) -> store.CardRows:
        """What posting ``card`` writes, computed before anything is written: the tool row's
        content and display, the component rows (without their message ids and carrier) and,
        unless Max watches the thread, each question's carrier and its push payload."""
        now = self.clock.now()
        # main_after_minutes null: never to Main by time (Max can still let Main decide)
        due_at = None if card.main_after_minutes is None else now + (
            WATCHED_DUE if watching else timedelta(minutes=card.main_after_minutes))
        expires_at = (None if card.expires_after_minutes is None
                      else now + timedelta(minutes=card.expires_after_minutes))
        facts = thread_facts(thread)
        rule = main_may_take(card, facts)
        states = {c.id: {"status": Status.OPEN.value, "answered_by": None, "answered_via": None,
                         "answer": None, "due_at": rfc3339_or_none(due_at),
                         "expires_at": rfc3339_or_none(expires_at),
                         "answerable_here": answerable_here(Status.OPEN),
                         "main_may_take": may_hand_to_main(Status.OPEN, rule),
                         "withdrawn_reason": None, "superseded_by": None, "seen_at": None}
                  for c in card.components}
        rows = [NewComponent(id=c.id, user_id=user_id, thread_id=thread.id, kind=c.kind,
                             stakes=c.stakes, sensitive=c.sensitive, due_at=due_at,
                             expires_at=expires_at) for c in card.components]
        return store.CardRows(
            tool_call_id=card.tool_call_id, content=content_for(due_at),
            display={"v": 1, "kind": "components", "states": states}, components=rows,
            carriers=[] if watching else carriers.carrier_rows(user_id, card.components, facts))

    # ----- the one transition shape and the one list of consequences -----

    async def _move(self, conn: asyncpg.Connection, user_id: str, component_id: str,
                    t: Transition, *, via: str | None = None,
                    answer: dict[str, Any] | None = None, main_note: str | None = None,
                    withdrawn_reason: str | None = None, superseded_by: str | None = None,
                    token_id: int | None = None) -> MovedComponent | None:
        """The CAS of row ``t`` with its mirror and audit (one statement); None if it lost.
        ``answer`` (already secret-safe) is written by answering rows; ``clears_answer`` rows
        wipe it; the audit row names ``token_id``, the API token that acted (None: the sweeper,
        or a push action token, which is not an API token)."""
        answering = answer is not None
        return await store.transition(
            conn, user_id, component_id, sources=t.source_list(), target=t.target.value,
            actor=t.actor.value, via=via, answerable_here=CARD_ANSWERABLE,
            main_may_take=may_hand_to_main(t.target, rule=False),
            set_answer=answering or t.clears_answer, answer=answer,
            answered_by=t.actor.value if answering else None,
            answered_via=via if answering else None, main_note=main_note,
            withdrawn_reason=withdrawn_reason, superseded_by=superseded_by,
            token_id=token_id)

    async def _refuse(self, conn: asyncpg.Connection, user_id: str, component_id: str,
                      t: Transition, status: str | None = None) -> ComponentError:
        """The table's refusal for a CAS that found no row (``status``: as read, else now)."""
        if status is None:
            status = await store.status_of(conn, user_id, component_id)
        code = t.refusal(status)
        return ComponentError(code, t.refusal_text(code, status), data={"status": status})

    async def _effects(self, conn: asyncpg.Connection, t: Transition, row: ComponentRow,
                       new: MovedComponent, definition: ComponentDefinition, *,
                       answer: dict[str, Any] | None = None, via: str | None = None,
                       note: str | None = None) -> MovedComponent:
        """Everything row ``t`` implies beyond its CAS, mirror and audit, in the table's order
        (the lock order: carriers, then messages and the woken threads' turns). ``row`` is the
        component with its context; ``note`` Main's hand-back note; returns ``new`` with what
        the effects linked to it."""
        user_id = row.user_id
        for effect in t.effects:
            if effect is Effect.ANSWER_MESSAGE:
                assert answer is not None and via is not None
                await self._post_answer(conn, user_id, row, definition, answer,
                                        by_main=t.actor.value == "main", via=via)
            elif effect is Effect.SETTLE_CARRIER:
                assert answer is not None and via is not None
                await carriers.settle_carrier(conn, user_id, new.decision_id, definition,
                                              answer, via)
            elif effect is Effect.ENSURE_CARRIER:
                # the panel and push can still answer while Main holds it
                decision = await carriers.ensure_carrier(conn, user_id, definition,
                                                         _thread(_in_context(row)))
                if new.decision_id is None:
                    await store.set_decision(conn, user_id, row.id, decision.id)
                    new = replace(new, decision_id=decision.id)
            elif effect is Effect.HANDOFF_MESSAGE:
                main_id = await timeline_store.main_thread_id(conn, user_id)
                await timeline_store.insert_message(
                    conn, user_id=user_id, thread_id=main_id, role="user",
                    body=handoff_text(definition, _in_context(row).thread_title, row.thread_id),
                    source_meta=handoff_meta(definition, row.thread_id,
                                             phase=t.target.value))
                await timeline_store.wake_thread(conn, user_id, main_id)
            elif effect is Effect.REOPEN_CARRIER:
                await carriers.revert(conn, user_id, new.decision_id,
                                      _in_context(row).thread_title)
            elif effect is Effect.REVOKE_EVENT:
                await timeline_store.insert_input_and_wake(
                    conn, user_id=user_id, thread_id=row.thread_id, role="event",
                    body=revoke_text(definition),
                    source_meta={"askHandoff": {"componentId": row.id,
                                                "phase": t.target.value}})
            elif effect is Effect.WITHDRAW_CARRIER:
                line = withdrawn_line(new.withdrawn_reason or "", new.superseded_by)
                await carriers.end_carrier(conn, user_id, new.decision_id, line,
                                           t.target.value)
            elif effect is Effect.TELL_MAIN:
                if new.from_status == Status.WITH_MAIN:
                    main_id = await timeline_store.main_thread_id(conn, user_id)
                    await timeline_store.insert_message(
                        conn, user_id=user_id, thread_id=main_id, role="event",
                        body=withdrawn_text(definition, new.withdrawn_reason or t.target),
                        source_meta={"askHandoff": {"componentId": row.id,
                                                    "threadId": row.thread_id,
                                                    "phase": t.target.value}})
            elif effect is Effect.EXPIRY_EVENT:
                await timeline_store.insert_input_and_wake(
                    conn, user_id=user_id, thread_id=row.thread_id, role="event",
                    body=expired_text(definition),
                    source_meta={"askHandoff": {"componentId": row.id,
                                                "phase": t.target.value}})
            elif effect is Effect.ORIGIN_EVENT:
                # history only: the row waits in the thread and is read with the next input
                await timeline_store.insert_events(conn, [timeline_store.NewEvent(
                    user_id, row.thread_id,
                    _origin_text(t.target, definition, answer, new.main_reason),
                    _origin_meta(row.id, t.target))])
            elif effect is Effect.TELL_MAX:
                await self._tell_max(conn, t, row, new, definition, answer, note)
            else:  # pragma: no cover - a new Effect must be handled here
                raise AssertionError(f"unhandled effect {effect!r}")
        return new

    async def _tell_max(self, conn: asyncpg.Connection, t: Transition, row: ComponentRow,
                        new: MovedComponent, definition: ComponentDefinition,
                        answer: dict[str, Any] | None, note: str | None) -> None:
        """``TELL_MAX``: the push to Max's devices saying what Main did (after the carrier's
        settlement in the table's order, so per device the question's withdraw goes first)."""
        title = _in_context(row).thread_title
        if t.target is Status.MAIN_ANSWERED:
            assert answer is not None
            await carriers.tell_main_answered(
                conn, row.user_id, new.decision_id, title,
                main_answered_push_body(definition, answer),
                None if definition.sensitive else new.main_reason)
        else:
            await carriers.tell_handed_back(conn, row.user_id, new.decision_id, title,
                                            handed_back_push_body(definition, note), note)

    # ----- Max answers -----

    async def answer(self, who: Principal, component_id: str, selected: Any, text: Any,
                     via: str, guard: carriers.AnswerGuard | None = None) -> dict[str, Any]:
        """Max's answer from the card, the panel or a push: exactly one surface wins.

        ``guard`` runs first inside the transaction (a push action token is spent there)."""
        if via not in ANSWERABLE:
            raise ValueError(f"unknown surface {via!r}")
        t = transition("answer", via)
        definition = await self._definition(who.user_id, component_id)
        answer = validate_answer(definition, selected, text)  # invalid: nothing is written
        kept = stored_answer(definition, answer)
        if guard is None and not definition.sensitive:
            settled = await self._answer_in_one(who.user_id, component_id, t, definition,
                                                answer, kept, via, who.token_id)
            self.metrics.answers.labels(via).inc()
            return component_projection(settled, definition)
        async with self.db.transaction() as conn:
            if guard is not None:
                await guard(conn)
            new = await self._move(conn, who.user_id, component_id, t, via=via, answer=kept,
                                   token_id=who.token_id)
            if new is None:
                lost = await self._refuse(conn, who.user_id, component_id, t)
                self.metrics.cas_conflicts.labels(lost.reason).inc()
                raise lost
            # the answer message's row needs only the component's own columns
            await self._effects(conn, t, new, new, definition, answer=answer, via=via)
        self.metrics.answers.labels(via).inc()
        return component_projection(new, definition)

    async def answer_card(self, who: Principal, tool_call_id: str,
                          answers: Any) -> dict[str, Any]:
        """Max answers several questions of one card at once (``POST /v1/cards/{id}/answer``).

        Before any write: the card (404 if the user has none by that id), every answer
        validated (one 422 with each field path). Then one transaction: the named components
        locked in id order, each moved by the ``answer`` row's own CAS; those that land make
        **one** user message (one wake-up) and their carriers settle; one already settled
        elsewhere is reported per question with its code and costs the others nothing. A retry
        of a request that landed finds its answers in place and reports them again
        (``replayed``), writing nothing."""
        t = transition("answer", Surface.CARD)
        card = await self._card(who.user_id, tool_call_id, answers)
        valid = validate_card_answers(card, answers)
        ids = sorted(valid)
        results: dict[str, Any] = {}
        landed: list[tuple[MovedComponent, ComponentDefinition, dict[str, Any]]] = []
        async with self.db.transaction() as conn:
            await store.lock_card(conn, who.user_id, ids, statuses(UNSETTLED))
            for cid in ids:
                definition = card.component(cid)
                kept = stored_answer(definition, valid[cid])
                new = await self._move(conn, who.user_id, cid, t, via=t.surface.value,
                                       answer=kept, token_id=who.token_id)
                if new is not None:
                    landed.append((new, definition, valid[cid]))
                    results[cid] = component_projection(new, definition)
                    continue
                row = await self._load(conn, who.user_id, cid)
                if row.status == Status.ANSWERED and row.answered_by == "max" \
                        and row.answered_via == t.surface.value and row.answer == kept:
                    results[cid] = {**component_projection(row, definition), "replayed": True}
                    continue
                lost = await self._refuse(conn, who.user_id, cid, t, row.status)
                self.metrics.cas_conflicts.labels(lost.reason).inc()
                results[cid] = {"error": lost.body()}
            if landed:
                await self._post_card_answer(conn, who.user_id, tool_call_id, landed)
                for new, definition, answer in landed:  # SETTLE_CARRIER
                    await carriers.settle_carrier(conn, who.user_id, new.decision_id,
                                                  definition, answer, t.surface.value)
        self.metrics.answers.labels(t.surface.value).inc(len(landed))
        return {"components": results}

    async def _card(self, user_id: str, tool_call_id: str, answers: Any) -> Card:
        """The card ``tool_call_id`` posted, found through the components the request names
        (404 when none of them exists: no such card for this user)."""
        names = list(answers) if isinstance(answers, dict) else []
        async with self.db.connection() as conn:
            rows = await store.card_with_context(
                conn, user_id, [f"{tool_call_id}:{q}" for q in names])
            if not rows:  # bad input only: find the card by its call id to say what is wrong
                rows = await store.any_of_card(conn, user_id, tool_call_id)
        if not rows:
            raise NotFound("No card with that id.")
        return card_of(rows[0])

    async def _post_card_answer(
            self, conn: asyncpg.Connection, user_id: str, tool_call_id: str,
            landed: list[tuple[MovedComponent, ComponentDefinition, dict[str, Any]]]) -> None:
        """The one message of a whole-card answer (ANSWER_MESSAGE) and its one wake-up. One
        landed answer reads exactly like a single answer; several become one message with a
        block per question. Secrets: masked in the row, the full body sealed beside it."""
        if len(landed) == 1:
            new, definition, answer = landed[0]
            await self._post_answer(conn, user_id, new, definition, answer, by_main=False,
                                    via=Surface.CARD.value)
            return
        pairs = [(d, a) for _, d, a in landed]
        body = card_answer_text(pairs)
        hidden = [(str(a.get("text") or ""), d.id) for d, a in pairs if d.sensitive]
        sealed = None
        if hidden:
            sealed = self.secrets.seal_card_answer(user_id, landed[0][0].thread_id, hidden,
                                                   body)
            body = card_answer_text([(d, {**a, "text": mask_token(d.id)} if d.sensitive else a)
                                     for d, a in pairs])
        await timeline_store.insert_input_and_wake(
            conn, user_id=user_id, thread_id=landed[0][0].thread_id, role="user", body=body,
            secret=sealed, display={"line": SECRET_LINE} if hidden else None,
            source_meta=card_answer_meta(tool_call_id, pairs, Surface.CARD.value),
            sensitive=bool(hidden))

    async def _answer_in_one(self, user_id: str, component_id: str, t: Transition,
                             definition: ComponentDefinition, answer: dict[str, Any],
                             kept: dict[str, Any], via: str,
                             token_id: int | None) -> MovedComponent:
        """A plain answer (nothing to seal, no guard) as one statement, ``store.answer_settle``:
        the same CAS, mirror and audit, and the same effects ``_effects`` writes for this row
        (answer message and wake-up, carrier settled, notifications withdrawn)."""
        assert t.effects == (Effect.ANSWER_MESSAGE, Effect.SETTLE_CARRIER), t.effects
        async with self.db.connection() as conn:
            for _ in range(ANSWER_SNAPSHOT_TRIES):
                new = await store.answer_settle(
                    conn, user_id, component_id, sources=t.source_list(),
                    target=t.target.value, answer=kept, actor=t.actor.value, via=via,
                    answerable_here=CARD_ANSWERABLE,
                    main_may_take=may_hand_to_main(t.target, rule=False),
                    body=answer_message_text(definition, answer, by_main=False),
                    source_meta=answer_meta(definition, answer, by_main=False, via=via),
                    answer_text=answer_summary(definition, answer),
                    withdraw_payload=withdraw_payload({"component_id": component_id}),
                    collapse_id=collapse_id(component_id), token_id=token_id)
                if new is not None:
                    return new
                status = await store.status_of(conn, user_id, component_id)
                if status not in t.source_list():
                    lost = await self._refuse(conn, user_id, component_id, t, status)
                    self.metrics.cas_conflicts.labels(lost.reason).inc()
                    raise lost
                # still answerable: the card moved after the statement's snapshot
                # (store.ANSWER_SETTLE); a new statement sees that move and its pushes
        raise Unavailable("The card kept changing while it was answered; try again.")

    def remember(self, user_id: str, card: Card) -> None:
        """Cache the definitions of a card whose rows have committed (they never change), so
        the first answer on this process needs not read them back."""
        if len(self._definitions) + len(card.components) > DEFINITION_CACHE_SIZE:
            self._definitions.clear()
        for component in card.components:
            self._definitions[(user_id, component.id)] = component

    async def _definition(self, user_id: str, component_id: str) -> ComponentDefinition:
        """A component's definition; cached, since the call that defines it never changes."""
        key = (user_id, component_id)
        definition = self._definitions.get(key)
        if definition is None:
            async with self.db.connection() as conn:
                definition = definition_of(await self._load(conn, user_id, component_id))
            if len(self._definitions) >= DEFINITION_CACHE_SIZE:
                self._definitions.clear()  # bounded; a refill is one query per card
            self._definitions[key] = definition
        return definition

    async def _post_answer(self, conn: asyncpg.Connection, user_id: str, row: ComponentRow,
                           definition: ComponentDefinition, answer: dict[str, Any], *,
                           by_main: bool, via: str) -> None:
        """The answer as Max's message in the asking thread; it wakes the thread. A secret
        answer's message row holds a masked body; the full one is sealed next to it."""
        body = answer_message_text(definition, answer, by_main=by_main)
        sealed = None
        if definition.sensitive:
            sealed = self.secrets.seal_answer(user_id, row.thread_id, definition.id,
                                              str(answer.get("text") or ""), body)
            body = answer_message_text(definition, {**answer, "text": mask_token(definition.id)},
                                       by_main=by_main)
        await timeline_store.insert_input_and_wake(
            conn, user_id=user_id, thread_id=row.thread_id, role="user", body=body,
            secret=sealed,
            display={"line": SECRET_LINE} if definition.sensitive else None,
            source_meta=answer_meta(definition, answer, by_main=by_main, via=via),
            sensitive=definition.sensitive)

    # ----- hand-off to Main -----

    async def to_main(self, who: Principal, component_id: str) -> dict[str, Any]:
        """Max taps "let Main decide": open → with-main, with a hand-off into Main's thread."""
        t = transition("to-main", Surface.CARD)
        async with self.db.transaction() as conn:
            row = await self._load(conn, who.user_id, component_id)
            card = card_of(row)
            if not main_may_take(card, _thread(row)):
                raise ComponentError("not_transferable")
            new = await self._move(conn, who.user_id, component_id, t, token_id=who.token_id)
            if new is None:
                raise await self._refuse(conn, who.user_id, component_id, t)
            new = await self._effects(conn, t, row, new, card.component(component_id))
        return component_projection(new, card.component(component_id), True)

    async def main_answer(self, conn: asyncpg.Connection, main: Principal, component_id: str,
                          selected: Any, text: Any, reason: Any) -> None:
        """Main's ``answer_for_max`` inside the caller's transaction (with-main → main-answered)."""
        t = transition("answer_for_max", Surface.MAIN)
        if not isinstance(reason, str) or not reason.strip():
            raise Invalid.at(["arguments", "reason"], "a reason is required: say why you chose")
        row = await self._load(conn, main.user_id, component_id)
        definition = definition_of(row)
        if definition.stakes == "irreversible":
            raise ComponentError("irreversible")
        answer = validate_answer(definition, selected, text)
        new = await self._move(conn, main.user_id, component_id, t, via=t.surface.value,
                               answer=stored_answer(definition, answer),
                               main_note=reason.strip(), token_id=main.token_id)
        if new is None:
            raise await self._refuse(conn, main.user_id, component_id, t)
        await self._effects(conn, t, row, new, definition, answer=answer, via=t.surface.value)
        self.metrics.answers.labels("main").inc()

    async def hand_back(self, conn: asyncpg.Connection, main: Principal, component_id: str,
                        note: Any = None) -> None:
        """Main's ``hand_back`` inside the caller's transaction: with-main → handed-back. Main's
        note, if any, is kept as ``main_reason``: Max reads it on the card ("Why?")."""
        t = transition("hand_back", Surface.MAIN)
        if note is not None and not isinstance(note, str):
            raise Invalid.at(["arguments", "note"], "note must be a string")
        if note is not None and len(note) > MAX_NOTE_CHARS:
            raise Invalid.at(["arguments", "note"], f"at most {MAX_NOTE_CHARS} characters")
        row = await self._load(conn, main.user_id, component_id)
        note = (note or "").strip() or None
        new = await self._move(conn, main.user_id, component_id, t, main_note=note,
                               token_id=main.token_id)
        if new is None:
            raise await self._refuse(conn, main.user_id, component_id, t)
        await self._effects(conn, t, row, new, definition_of(row), note=note)

    async def revoke(self, who: Principal, component_id: str, via: str = "card",
                     guard: carriers.AnswerGuard | None = None) -> dict[str, Any]:
        """Max revokes Main's answer: main-answered → revoked, the carrier reopens, and the
        asking thread gets an event so its agent can adjust. ``via``: the card (or panel),
        or ``push`` (the Revoke button; ``guard`` spends its action token first, inside the
        transaction, so a refused revoke leaves the token unused)."""
        t = transition("revoke", via)
        async with self.db.transaction() as conn:
            if guard is not None:
                await guard(conn)
            row = await self._load(conn, who.user_id, component_id)
            definition = definition_of(row)
            new = await self._move(conn, who.user_id, component_id, t, token_id=who.token_id)
            if new is None:
                raise await self._refuse(conn, who.user_id, component_id, t, row.status)
            await self._effects(conn, t, row, new, definition)
        return component_projection(replace(new, answered_at=None), definition)

    # ----- the asking agent withdraws -----

    async def withdraw(self, conn: asyncpg.Connection, who: Principal, thread_id: str,
                       component_ids: list[str], reason: str,
                       superseded_by: str | None = None) -> dict[str, list[str]]:
        """``withdraw_question`` (and ``supersedes``) inside the caller's transaction: each
        named component of ``thread_id`` that is unsettled → withdrawn. Returns the ids
        ``withdrawn`` now and those ``already`` withdrawn (idempotent); a settled one (answered,
        expired…) refuses the whole call and nothing is written."""
        t = transition("withdraw", Surface.TOOL)
        done: dict[str, list[str]] = {"withdrawn": [], "already": []}
        for component_id in component_ids:
            row = await self._load(conn, who.user_id, component_id)
            if row.thread_id != thread_id:
                raise NotFound("No question of this conversation has that id.")
            if row.status == t.target:
                done["already"].append(component_id)
                continue
            new = await self._move(conn, who.user_id, component_id, t,
                                   withdrawn_reason=reason, superseded_by=superseded_by,
                                   token_id=who.token_id)
            if new is None:
                raise await self._refuse(conn, who.user_id, component_id, t)
            await self._effects(conn, t, row, new, definition_of(row))
            done["withdrawn"].append(component_id)
        return done

    async def in_thread(self, conn: asyncpg.Connection, user_id: str, thread_id: str,
                        component_id: str) -> bool:
        row = await store.get_with_context(conn, user_id, component_id)
        return row is not None and row.thread_id == thread_id

    async def card_component_ids(self, conn: asyncpg.Connection, user_id: str, thread_id: str,
                                 tool_call_id: str) -> list[str]:
        """The component ids of the card ``tool_call_id`` posted in ``thread_id``."""
        return [r.id for r in await store.card_components(conn, user_id, thread_id,
                                                          tool_call_id)]

    # ----- the due sweep -----

    async def sweep_due(self, limit: int = 500, now: datetime | None = None) -> dict[str, int]:
        """One batch: due cards go to Main where it may take them; the others stay open with
        a carrier. ``SKIP LOCKED`` lets any number of sweepers run at once.

        The batch is written set-wise — a fixed number of statements whatever its size (it
        was ~8 per card, and 10,000 due cards took 14 s; docs/benchmarks.md).
        """
        async with self.db.transaction() as conn:
            rows = await store.claim_due(conn, now or self.clock.now(), limit)
            if not rows:  # the common pass: one statement, nothing to move
                return {"handed_to_main": 0, "kept_open": 0}
            # a batch spans users, and ids are only unique per user: key by (user_id, id)
            cards = {_key(r): card_of(r) for r in rows}
            takes = {_key(r): main_may_take(cards[_key(r)], _thread(r)) for r in rows}
            moved = await store.sweep_move(
                conn, [k for k, t in takes.items() if t], [k for k, t in takes.items() if not t],
                to_main_target=SWEEP_TO_MAIN.target.value, keep_target=SWEEP_KEEP.target.value,
                sources=statuses(SWEEP_TO_MAIN.sources | SWEEP_KEEP.sources))
            # the claim locked every row, so each one moved; the filter is belt and braces
            take = [r for r in rows if takes[_key(r)] and _key(r) in moved]
            keep = [r for r in rows if not takes[_key(r)] and _key(r) in moved]
            if take or keep:
                await self._sweep_writes(conn, take, keep, cards, moved)
        self.metrics.sweeps.labels("handed_to_main").inc(len(take))
        self.metrics.sweeps.labels("kept_open").inc(len(keep))
        return {"handed_to_main": len(take), "kept_open": len(keep)}

    async def _sweep_writes(self, conn: asyncpg.Connection, take: list[ComponentInContext],
                            keep: list[ComponentInContext], cards: dict[store.Key, Card],
                            moved: dict[store.Key, SweptComponent]) -> None:
        """The effects of the sweep rows (``ENSURE_CARRIER`` for both, ``HANDOFF_MESSAGE`` for
        ``to-main``), set-wise, plus the mirror and the audit of the hand-overs (a kept card's
        status does not change, so it has no audit row). Lock order: tool rows ascending (in
        ``mirror_many``), then carriers, then the Main threads' turns in thread id order."""
        patches: dict[store.ToolRow, dict[str, dict[str, object]]] = {}
        for row in take + keep:
            patches.setdefault((row.user_id, row.tool_message_id), {})[row.id] = \
                state_of(moved[_key(row)])
        await store.mirror_many(conn, patches)
        # a carrier for every swept card: the panel and push can answer it (even with Main)
        ids = await carriers.ensure_carriers(conn, [
            (row.user_id, cards[_key(row)].component(row.id), _thread(row))
            for row in take + keep if moved[_key(row)].decision_id is None])
        if ids:
            await store.set_decisions(conn, ids)
        if not take:
            return
        mains = await timeline_store.main_thread_ids(conn, sorted({r.user_id for r in take}))
        await timeline_store.insert_inputs_and_wake(conn, [
            InputRow(user_id=row.user_id, thread_id=mains[row.user_id], role="user",
                     body=handoff_text(cards[_key(row)].component(row.id),
                                       row.thread_title, row.thread_id),
                     source_meta=handoff_meta(cards[_key(row)].component(row.id),
                                              row.thread_id))
            for row in take])
        # ORIGIN_EVENT: the asking threads' history says their questions went to Main
        await timeline_store.insert_events(conn, [
            timeline_store.NewEvent(row.user_id, row.thread_id,
                                    handed_text(cards[_key(row)].component(row.id)),
                                    _origin_meta(row.id, SWEEP_TO_MAIN.target))
            for row in take])
        await store.audit_many(conn, [(row.user_id, row.id) for row in take],
                               from_status=Status.OPEN.value,
                               to_status=SWEEP_TO_MAIN.target.value,
                               actor=SWEEP_TO_MAIN.actor.value)

    async def sweep_expired(self, limit: int = 500, now: datetime | None = None) -> int:
        """One batch of the ``expire`` row, set-wise like the due sweep (a fixed number of
        statements per batch; ``SKIP LOCKED`` + the CAS make each card expire once however
        many sweepers run). Lock order as the due sweep: the claimed components, tool rows
        ascending, carriers, then the woken threads in id order."""
        t = SWEEP_EXPIRE
        async with self.db.transaction() as conn:
            rows = await store.claim_expired(conn, now or self.clock.now(), limit)
            if not rows:
                return 0
            # the tool rows before the move, in the order answers lock them (component, tool
            # row, and only at commit the thread: threads.open_cards)
            await store.lock_tool_rows(conn, [(r.user_id, r.tool_message_id) for r in rows])
            moved = await store.expire_move(conn, [_key(r) for r in rows], t.target.value,
                                            t.source_list())
            rows = [r for r in rows if _key(r) in moved]
            patches: dict[store.ToolRow, dict[str, dict[str, object]]] = {}
            for row in rows:
                patches.setdefault((row.user_id, row.tool_message_id), {})[row.id] = \
                    state_of(moved[_key(row)])
            await store.mirror_many(conn, patches)
            definitions = {_key(r): definition_of(r) for r in rows}
            for row in rows:  # WITHDRAW_CARRIER
                await carriers.end_carrier(conn, row.user_id, row.decision_id,
                                           "Expired unanswered", t.target.value)
            held = [r for r in rows if r.status == Status.WITH_MAIN]  # TELL_MAIN
            if held:
                mains = await timeline_store.main_thread_ids(
                    conn, sorted({r.user_id for r in held}))
                for row in held:
                    await timeline_store.insert_message(
                        conn, user_id=row.user_id, thread_id=mains[row.user_id],
                        role="event", body=withdrawn_text(definitions[_key(row)], "it expired"),
                        source_meta={"askHandoff": {"componentId": row.id,
                                                    "threadId": row.thread_id,
                                                    "phase": t.target.value}})
            await timeline_store.insert_inputs_and_wake(conn, [  # EXPIRY_EVENT
                InputRow(user_id=row.user_id, thread_id=row.thread_id, role="event",
                         body=expired_text(definitions[_key(row)]),
                         source_meta={"askHandoff": {"componentId": row.id,
                                                     "phase": t.target.value}})
                for row in rows])
            for source in sorted({r.status for r in rows}):
                await store.audit_many(conn, [(r.user_id, r.id) for r in rows
                                              if r.status == source],
                                       from_status=source, to_status=t.target.value,
                                       actor=t.actor.value)
        self.metrics.sweeps.labels("expired").inc(len(rows))
        return len(rows)

    async def sweep_unwatched(self, limit: int = 500, now: datetime | None = None) -> int:
        """One batch of the ``unwatched`` row: cards posted while Max watched their thread (no
        carrier, due in an hour) whose thread nobody watches any more — his presence lapsed
        or he left — get their carrier and its push, and a due time of
        ``main_after_minutes`` from now. Set-wise like the due sweep; ``SKIP LOCKED`` and the
        claim's ``decision_id IS NULL`` make each card judged once however many sweepers run.
        Lock order as the due sweep: components, tool rows ascending, then carriers."""
        t = SWEEP_UNWATCHED
        now = now or self.clock.now()
        async with self.db.transaction() as conn:
            rows = await store.claim_unwatched(conn, now, limit)
            if not rows:
                return 0
            cards = {_key(r): card_of(r) for r in rows}
            due = {k: None if c.main_after_minutes is None
                   else now + timedelta(minutes=c.main_after_minutes) for k, c in cards.items()}
            moved = await store.unwatched_move(conn, due, t.source_list())
            rows = [r for r in rows if _key(r) in moved]
            patches: dict[store.ToolRow, dict[str, dict[str, object]]] = {}
            for row in rows:
                rule = main_may_take(cards[_key(row)], _thread(row))
                patches.setdefault((row.user_id, row.tool_message_id), {})[row.id] = \
                    state_of(moved[_key(row)], rule)
            await store.mirror_many(conn, patches)
            ids = await carriers.ensure_carriers(conn, [  # ENSURE_CARRIER (and its push)
                (row.user_id, cards[_key(row)].component(row.id), _thread(row))
                for row in rows])
            await store.set_decisions(conn, ids)
        self.metrics.sweeps.labels("unwatched").inc(len(rows))
        return len(rows)

    async def sweep_unwatched_all(self, limit: int = 500) -> int:
        total = 0
        while True:
            n = await self.sweep_unwatched(limit)
            total += n
            if n < limit:
                return total

    async def sweep_expired_all(self, limit: int = 500) -> int:
        total = 0
        while True:
            n = await self.sweep_expired(limit)
            total += n
            if n < limit:
                return total

    async def sweep_due_all(self, limit: int = 500) -> dict[str, int]:
        """Sweep batches until nothing is due (``maxclaw sweep``)."""
        total = {"handed_to_main": 0, "kept_open": 0}
        while True:
            result = await self.sweep_due(limit)
            for key in total:
                total[key] += result[key]
            if sum(result.values()) < limit:
                return total

    async def open_components(self, user_id: str, thread_id: str) -> list[str]:
        """Ids of the thread's cards that are not settled (what ``finish`` reports)."""
        async with self.db.connection() as conn:
            return await store.thread_components(conn, user_id, thread_id,
                                                 statuses(UNSETTLED))
