"""The hand-off family: to Main ("let Main decide"), Main's answer, Main's hand-back, and
Max revoking Main's answer. Each is one row of the transitions table, moved by ``move`` and
followed by the row's effects (``components/effects.py``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import asyncpg

from maxclaw.auth.service import Principal
from maxclaw.cards.answers import stored_answer, validate_answer
from maxclaw.cards.rules import main_may_take
from maxclaw.clock import Clock
from maxclaw.components.effects import with_decision
from maxclaw.components.machine import Surface, transition
from maxclaw.components.moves import AnswerGuard, CardJob
from maxclaw.components.projections import card_of, component_projection, definition_of, thread_of
from maxclaw.db.database import Database
from maxclaw.errors import ComponentError, Invalid
from maxclaw.metrics import Metrics
from maxclaw.prefs import store as prefs_store
from maxclaw.prefs.due import MAIN_TIMEOUT_MINUTES, main_due
from maxclaw.secrets.service import SecretService

MAX_NOTE_CHARS = 2000  # Main's hand-back note, as long as a question may be
MAX_REASON_CHARS = 2000  # Main's reason (and withdraw_question's): Max reads it on the card


class HandOff(CardJob):
    """to Main, Main's answer, hand-back, revoke."""

    def __init__(self, db: Database, clock: Clock, metrics: Metrics, secrets: SecretService,
                 main_timeout_minutes: int = MAIN_TIMEOUT_MINUTES) -> None:
        super().__init__(db, clock, metrics, secrets)
        self.main_timeout_minutes = main_timeout_minutes  # the server's default

    async def to_main(self, who: Principal, component_id: str) -> dict[str, Any]:
        """Max taps "let Main decide": open → with-main, with a hand-off into Main's thread;
        Main's time to decide it runs from now (his ``main_timeout_minutes``)."""
        t = transition("to-main", Surface.CARD)
        async with self.db.transaction() as conn:
            row = await self.load(conn, who.user_id, component_id)
            card = card_of(row)
            if not main_may_take(card, thread_of(row)):
                raise ComponentError("not_transferable")
            prefs = await prefs_store.get(conn, who.user_id)
            new = await self.move(conn, who.user_id, component_id, t, token_id=who.token_id,
                                  main_due_at=main_due(prefs, self.clock.now(),
                                                       self.main_timeout_minutes))
            if new is None:
                raise await self.refuse(conn, who.user_id, component_id, t)
            moved = await self.effects(conn, t, new, card.component(component_id), row)
        return component_projection(with_decision(new, moved), card.component(component_id),
                                    True)

    async def main_answer(self, conn: asyncpg.Connection, main: Principal, component_id: str,
                          selected: Any, text: Any, reason: Any) -> None:
        """Main's ``answer_for_max`` inside the caller's transaction (with-main → main-answered)."""
        t = transition("answer_for_max", Surface.MAIN)
        if not isinstance(reason, str) or not reason.strip():
            raise Invalid.at(["arguments", "reason"], "a reason is required: say why you chose")
        if len(reason) > MAX_REASON_CHARS:
            raise Invalid.at(["arguments", "reason"],
                             f"at most {MAX_REASON_CHARS} characters: say why in short")
        row = await self.load(conn, main.user_id, component_id)
        definition = definition_of(row)
        if definition.stakes == "irreversible":
            raise ComponentError("irreversible")
        answer = validate_answer(definition, selected, text)
        new = await self.move(conn, main.user_id, component_id, t, via=t.surface.value,
                              answer=stored_answer(definition, answer),
                              main_note=reason.strip(), token_id=main.token_id)
        if new is None:
            raise await self.refuse(conn, main.user_id, component_id, t)
        await self.effects(conn, t, new, definition, row, answer=answer, via=t.surface.value)
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
        row = await self.load(conn, main.user_id, component_id)
        note = (note or "").strip() or None
        new = await self.move(conn, main.user_id, component_id, t, main_note=note,
                              token_id=main.token_id)
        if new is None:
            raise await self.refuse(conn, main.user_id, component_id, t)
        await self.effects(conn, t, new, definition_of(row), row, note=note)

    async def revoke(self, who: Principal, component_id: str, via: str = "card",
                     guard: AnswerGuard | None = None) -> dict[str, Any]:
        """Max revokes Main's answer: main-answered → revoked, the carrier reopens, and the
        asking thread gets an event so its agent can adjust. ``via``: the card (or panel),
        or ``push`` (the Revoke button; ``guard`` spends its action token first, inside the
        transaction, so a refused revoke leaves the token unused)."""
        t = transition("revoke", via)
        async with self.db.transaction() as conn:
            if guard is not None:
                await guard(conn)
            row = await self.load(conn, who.user_id, component_id)
            definition = definition_of(row)
            new = await self.move(conn, who.user_id, component_id, t, token_id=who.token_id)
            if new is None:
                raise await self.refuse(conn, who.user_id, component_id, t, row.status)
            await self.effects(conn, t, new, definition, row)
        return component_projection(replace(new, answered_at=None), definition)
