"""Max answers: one question (from the card, the panel or a push) or a whole card at once.

Exactly one surface wins a question: the ``answer`` rows' CAS. A plain answer (nothing to
seal, no guard to run) is one statement, ``store.ANSWER_SETTLE``, the fused form of the CAS
and of ``effects.answer_message`` + ``effects.settle_carrier``
(``tests/integration/test_effects_equivalence.py`` compares both ways row by row).
"""

from __future__ import annotations

from typing import Any

from maxclaw.auth.service import Principal
from maxclaw.cards.answers import (
    answer_summary,
    stored_answer,
    validate_answer,
    validate_card_answers,
)
from maxclaw.cards.definitions import Card, ComponentDefinition
from maxclaw.cards.text import answer_message_text, answer_meta
from maxclaw.clock import Clock
from maxclaw.components import effects, store
from maxclaw.components.effects import Moved
from maxclaw.components.machine import (
    UNSETTLED,
    Effect,
    Status,
    Surface,
    Transition,
    may_hand_to_main,
    statuses,
    transition,
)
from maxclaw.components.moves import ANSWERABLE, CARD_ANSWERABLE, AnswerGuard, CardJob
from maxclaw.components.projections import card_of, component_projection, definition_of
from maxclaw.components.rows import MovedComponent
from maxclaw.db.database import Database
from maxclaw.errors import NotFound, Unavailable
from maxclaw.metrics import Metrics
from maxclaw.push.payload import collapse_id, withdraw_payload
from maxclaw.secrets.service import SecretService

DEFINITION_CACHE_SIZE = 50_000
# a plain answer's statement runs again when the card moved after its snapshot; each try sees
# one more concurrent move, so a few tries only lose to a card moved again and again
ANSWER_SNAPSHOT_TRIES = 4
# what ANSWER_SETTLE fuses: it must stay the answer rows' effects, in this order (but for
# TELL_MAIN, which does something only for a card Main held: see fused_sources)
FUSED_EFFECTS = (Effect.ANSWER_MESSAGE, Effect.SETTLE_CARRIER)
# the effects a move from one of fused_sources writes nothing for
_NOTHING_UNLESS_WITH_MAIN = frozenset({Effect.TELL_MAIN})


def fused_sources(t: Transition) -> list[str]:
    """The from-states ``ANSWER_SETTLE`` answers from: the row's, without with-main. A card
    Main holds is answered by the general path (``move`` + ``effects.run``), which runs every
    effect of the row, TELL_MAIN included (Main's thread is told); for the others TELL_MAIN
    writes nothing, so the one statement writes what the general path would."""
    return statuses(t.sources - {Status.WITH_MAIN})


class Answers(CardJob):
    """Max's answers: ``answer`` (one question, any surface) and ``answer_card``."""

    def __init__(self, db: Database, clock: Clock, metrics: Metrics,
                 secrets: SecretService) -> None:
        super().__init__(db, clock, metrics, secrets)
        # the definitions of cards this process posted or read (they never change)
        self._definitions: dict[tuple[str, str], ComponentDefinition] = {}

    async def answer(self, who: Principal, component_id: str, selected: Any, text: Any,
                     via: str, guard: AnswerGuard | None = None) -> dict[str, Any]:
        """Max's answer from the card, the panel or a push: exactly one surface wins.

        ``guard`` runs first inside the transaction (a push action token is spent there)."""
        if via not in ANSWERABLE:
            raise ValueError(f"unknown surface {via!r}")
        t = transition("answer", via)
        definition = await self._definition(who.user_id, component_id)
        answer = validate_answer(definition, selected, text)  # invalid: nothing is written
        kept = stored_answer(definition, answer)
        if guard is None and not definition.sensitive:
            settled = await self.answer_fused(who.user_id, component_id, t, definition,
                                              answer, kept, via, who.token_id)
            if settled is not None:
                self.metrics.answers.labels(via).inc()
                return component_projection(settled, definition)
            # Main holds it: the general path, which tells Main's thread
        async with self.db.transaction() as conn:
            if guard is not None:
                await guard(conn)
            new = await self.move(conn, who.user_id, component_id, t, via=via, answer=kept,
                                  token_id=who.token_id)
            if new is None:
                lost = await self.refuse(conn, who.user_id, component_id, t)
                self.metrics.cas_conflicts.labels(lost.reason).inc()
                raise lost
            # the answer message's row needs only the component's own columns
            await self.effects(conn, t, new, definition, answer=answer, via=via)
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
        landed: list[Moved] = []
        async with self.db.transaction() as conn:
            await store.lock_card(conn, who.user_id, ids, statuses(UNSETTLED))
            for cid in ids:
                definition = card.component(cid)
                kept = stored_answer(definition, valid[cid])
                new = await self.move(conn, who.user_id, cid, t, via=t.surface.value,
                                      answer=kept, token_id=who.token_id)
                if new is not None:
                    landed.append(Moved.of(new, new.from_status, definition,
                                           answer=valid[cid], via=t.surface.value))
                    results[cid] = component_projection(new, definition)
                    continue
                row = await self.load(conn, who.user_id, cid)
                if row.status == Status.ANSWERED and row.answered_by == "max" \
                        and row.answered_via == t.surface.value and row.answer == kept:
                    results[cid] = {**component_projection(row, definition), "replayed": True}
                    continue
                lost = await self.refuse(conn, who.user_id, cid, t, row.status)
                self.metrics.cas_conflicts.labels(lost.reason).inc()
                results[cid] = {"error": lost.body()}
            # the landed answers make one message (one wake-up); each carrier settles
            await effects.run(conn, t, landed, self.secrets)
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

    async def answer_fused(self, user_id: str, component_id: str, t: Transition,
                           definition: ComponentDefinition, answer: dict[str, Any],
                           kept: dict[str, Any], via: str,
                           token_id: int | None) -> MovedComponent | None:
        """A plain answer (nothing to seal, no guard) as one statement, ``store.answer_settle``:
        an optimisation of ``move`` + ``effects.run`` for this row, writing the same rows (the
        CAS, mirror and audit; the answer message and wake-up, the carrier settled, its
        notifications withdrawn). None when the card is with Main (``fused_sources``): the
        caller answers it by the general path."""
        assert tuple(e for e in t.effects if e not in _NOTHING_UNLESS_WITH_MAIN) \
            == FUSED_EFFECTS, t.effects
        sources = fused_sources(t)
        # autocommit, or a transaction when the hints go after the commit (Database.writer)
        async with self.db.writer() as conn:
            for _ in range(ANSWER_SNAPSHOT_TRIES):
                new = await store.answer_settle(
                    conn, user_id, component_id, sources=sources,
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
                if status == Status.WITH_MAIN and t.allows(status):
                    return None
                if status not in sources:
                    lost = await self.refuse(conn, user_id, component_id, t, status)
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
                definition = definition_of(await self.load(conn, user_id, component_id))
            if len(self._definitions) >= DEFINITION_CACHE_SIZE:
                self._definitions.clear()  # bounded; a refill is one query per card
            self._definitions[key] = definition
        return definition
