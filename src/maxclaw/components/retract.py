"""Max takes back his answer (a mis-tap): answered → open, the ``retract`` row of the table.

Allowed while no model has been handed the answer and within the retract window
(``settings.retract_window_minutes``). The race with the agent's claim (or inbox) of that
input has one outcome: both lock the answer message before the component
(``retract_store``'s lock order), so either the delivery stamped it first and the retract is
``409 seen``, or the retract took it back first and no model ever reads it.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from maxclaw.auth.service import Principal
from maxclaw.cards.rules import main_may_take
from maxclaw.clock import Clock
from maxclaw.components import retract_store
from maxclaw.components.machine import Status, Surface, transition
from maxclaw.components.moves import AnswerGuard, CardJob
from maxclaw.components.projections import card_of, component_projection, thread_of
from maxclaw.db.database import Database
from maxclaw.errors import ComponentError
from maxclaw.metrics import Metrics
from maxclaw.secrets.service import SecretService

WINDOW_MINUTES = 10.0  # the default of settings.retract_window_minutes


class Retractions(CardJob):
    """Take an answer back."""

    def __init__(self, db: Database, clock: Clock, metrics: Metrics, secrets: SecretService,
                 window_minutes: float = WINDOW_MINUTES) -> None:
        super().__init__(db, clock, metrics, secrets)
        self.window = timedelta(minutes=window_minutes)

    async def retract(self, who: Principal, component_id: str,
                      guard: AnswerGuard | None = None) -> dict[str, Any]:
        """Max's own answer taken back before any model saw it: the card reopens (due again
        from now), the answer message leaves the inbox, the carrier reopens. Refusals write
        nothing: ``404`` (not his), the table's code (not ``answered``), ``409 seen``,
        ``409 too_late``. ``guard`` (a notification's retract token, spent once) runs in the
        transaction once every check passed, before anything is written."""
        t = transition("retract", Surface.CARD)
        now = self.clock.now()
        async with self.db.transaction() as conn:
            row = await self.load(conn, who.user_id, component_id)
            if not t.allows(row.status):
                raise await self.refuse(conn, who.user_id, component_id, t, row.status)
            # the claim's lock order: the queued turn, the answer message, then the component
            await retract_store.lock_queued_turn(conn, who.user_id, row.thread_id)
            message = await retract_store.answer_message(conn, who.user_id, row.thread_id,
                                                         row.message_id, component_id)
            row = await self.load(conn, who.user_id, component_id)  # as of the locks
            if not t.allows(row.status):
                raise await self.refuse(conn, who.user_id, component_id, t, row.status)
            if row.seen_at is not None or (message is not None
                                           and message.delivered_at is not None):
                raise ComponentError("seen", data={"status": row.status})
            if message is None:  # answered together with its whole card: one message
                raise ComponentError("conflict", "This answer went out with the rest of its "
                                     "card and cannot be taken back alone; send a correction.",
                                     data={"status": row.status})
            if row.answered_at is None or now - row.answered_at > self.window:
                raise ComponentError("too_late", data={"status": row.status})
            if guard is not None:
                await guard(conn)
            new = await self.move(conn, who.user_id, component_id, t, token_id=who.token_id)
            if new is None:
                raise await self.refuse(conn, who.user_id, component_id, t)
            card = card_of(row)
            definition = card.component(component_id)
            await self.effects(conn, t, new, definition, row, at=now)
        rule = main_may_take(card, thread_of(row))
        due = None if card.main_after_minutes is None else now + timedelta(
            minutes=card.main_after_minutes)
        assert new.status == Status.OPEN
        return component_projection(replace(new, answered_at=None, due_at=due), definition,
                                    rule)
