"""The one transition shape every card job shares: load, CAS (with mirror and audit), refuse,
then the row's effects (``components/effects.py``).

``CardJob`` is the base of the jobs of the card package (posting, answers, hand-off, withdraw,
sweeps): each public method is one transaction around one row of the transitions table
(``components/machine.py``):
1. ``move``: the CAS on ``message_components`` from the row's from-states, the mirror into the
   tool row's ``display.states`` (the rev trigger syncs every client) and the audit row, in one
   statement (``store.TRANSITION``); no row back: another surface won → ``ComponentError``
   with the row's refusal code (``refuse``), and nothing else is written;
2. ``effects``: the row's consequences, ``effects.run`` — the same functions the set-wise
   sweeps call.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import asyncpg

from maxclaw.cards.definitions import ComponentDefinition
from maxclaw.clock import Clock
from maxclaw.components import effects, store
from maxclaw.components.effects import Moved
from maxclaw.components.machine import Surface, Transition, answerable, may_hand_to_main, statuses
from maxclaw.components.rows import ComponentInContext, MovedComponent
from maxclaw.db.database import Database
from maxclaw.errors import ComponentError, NotFound
from maxclaw.metrics import Metrics
from maxclaw.secrets.service import SecretService

# Runs inside an answer's (or a revoke's) transaction before the card changes; raising rolls
# it back (a push action token is spent this way, so a refused answer leaves the token unused).
AnswerGuard = Callable[[asyncpg.Connection], Awaitable[None]]
# Max answers from these states (the transitions table's ``answer`` rows): the card itself is
# locked while Main holds it, the panel and push are not.
ANSWERABLE = {s.value: statuses(answerable(s)) for s in (Surface.CARD, Surface.DECISION,
                                                         Surface.PUSH)}
CARD_ANSWERABLE = ANSWERABLE[Surface.CARD.value]


class CardJob:
    """What every job of the card package shares: its dependencies and the transition shape."""

    def __init__(self, db: Database, clock: Clock, metrics: Metrics,
                 secrets: SecretService) -> None:
        self.db = db
        self.clock = clock
        self.metrics = metrics
        self.secrets = secrets

    async def load(self, conn: asyncpg.Connection, user_id: str,
                   component_id: str) -> ComponentInContext:
        """The component with its card and thread, or 404."""
        row = await store.get_with_context(conn, user_id, component_id)
        if row is None:
            raise NotFound("No such component.")
        return row

    async def move(self, conn: asyncpg.Connection, user_id: str, component_id: str,
                   t: Transition, *, via: str | None = None,
                   answer: dict[str, Any] | None = None, main_note: str | None = None,
                   withdrawn_reason: str | None = None, superseded_by: str | None = None,
                   token_id: int | None = None,
                   main_due_at: datetime | None = None) -> MovedComponent | None:
        """The CAS of row ``t`` with its mirror and audit (one statement); None if it lost.
        ``answer`` (already secret-safe) is written by answering rows; ``clears_answer`` rows
        wipe it; the audit row names ``token_id``, the API token that acted (None: the sweeper,
        or a push action token, which is not an API token). ``main_due_at``: when Main's time
        to decide is up, for a move to with-main (every other move clears it)."""
        answering = answer is not None
        return await store.transition(
            conn, user_id, component_id, sources=t.source_list(), target=t.target.value,
            actor=t.actor.value, via=via, answerable_here=CARD_ANSWERABLE,
            main_may_take=may_hand_to_main(t.target, rule=False),
            set_answer=answering or t.clears_answer, answer=answer,
            answered_by=t.actor.value if answering else None,
            answered_via=via if answering else None, main_note=main_note,
            withdrawn_reason=withdrawn_reason, superseded_by=superseded_by,
            token_id=token_id, main_due_at=main_due_at)

    async def refuse(self, conn: asyncpg.Connection, user_id: str, component_id: str,
                     t: Transition, status: str | None = None) -> ComponentError:
        """The table's refusal for a CAS that found no row (``status``: as read, else now)."""
        if status is None:
            status = await store.status_of(conn, user_id, component_id)
        code = t.refusal(status)
        return ComponentError(code, t.refusal_text(code, status), data={"status": status})

    async def effects(self, conn: asyncpg.Connection, t: Transition, new: MovedComponent,
                      definition: ComponentDefinition,
                      context: ComponentInContext | None = None, **extra: Any) -> Moved:
        """Row ``t``'s effects for one moved component (``extra``: ``answer``, ``via``,
        ``note``); returns what they linked to it (its carrier)."""
        moved = Moved.of(new, new.from_status, definition, context, **extra)
        await effects.run(conn, t, [moved], self.secrets)
        return moved
