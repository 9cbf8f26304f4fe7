"""The decisions panel: the user's queue of decisions (carriers of cards, and Main's answers
to review), listed, dismissed and snoozed.

The carrier functions that run inside a card's transaction live apart, in ``carriers.py``;
settling a decision (answering the card it carries) is ``surfaces/panel.py``'s, above the
components, decisions and push packages.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from maxclaw.auth.service import Principal, parse_int_id
from maxclaw.clock import Clock
from maxclaw.db.database import Database
from maxclaw.decisions import store
from maxclaw.decisions.projections import decision_fields, decision_projection
from maxclaw.errors import ComponentError, Invalid, NotFound
from maxclaw.push import outbox
from maxclaw.timeline.service import check_limit


class DecisionService:
    """The decisions panel's own rules: list, get, dismiss, snooze the nudge bar. Settling a
    decision is answering its card: ``surfaces/panel.py`` does that, above this package."""

    def __init__(self, db: Database, clock: Clock) -> None:
        self.db = db
        self.clock = clock

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
