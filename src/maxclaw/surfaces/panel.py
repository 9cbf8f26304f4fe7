"""The decisions panel as a surface: its own rules (``decisions.service.DecisionService``)
plus settling a decision, which is answering the card it carries (or revoking Main's answer
to it) through the card package, so whichever surface is first counts once."""

from __future__ import annotations

from typing import Any

from maxclaw.auth.service import Principal
from maxclaw.clock import Clock
from maxclaw.components.moves import AnswerGuard
from maxclaw.components.service import ComponentService
from maxclaw.db.database import Database
from maxclaw.decisions.service import DecisionService
from maxclaw.errors import ComponentError, Invalid


class DecisionPanel(DecisionService):
    """The panel: list, get, dismiss, snooze (inherited), settle and revoke (through the card)."""

    def __init__(self, db: Database, clock: Clock, components: ComponentService) -> None:
        super().__init__(db, clock)
        self.components = components

    async def _carried_card(self, who: Principal, decision_id: int | str) -> dict[str, Any]:
        decision = await self.get(who, decision_id)
        if decision["kind"] != "agent-question" or decision["component_id"] is None:
            raise Invalid.at(["decision_id"], "this decision does not carry a question card")
        return decision

    async def settle(self, who: Principal, decision_id: int | str, selected: Any, text: Any,
                     via: str = "decision", guard: AnswerGuard | None = None) -> dict[str, Any]:
        """Answer the card the decision carries (from ``via``: the panel or a push), then show
        the decision."""
        decision = await self._carried_card(who, decision_id)
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
        decision = await self._carried_card(who, decision_id)
        await self.components.revoke(who, decision["component_id"], via=via, guard=guard)
        return await self.get(who, decision_id)

    async def retract(self, who: Principal, decision_id: int | str,
                      guard: AnswerGuard | None = None) -> dict[str, Any]:
        """Take back Max's answer to the question this decision carries (the "Take back"
        button of the notification that confirmed it), then show the decision (open again)."""
        decision = await self._carried_card(who, decision_id)
        await self.components.retract(who, decision["component_id"], guard=guard)
        return await self.get(who, decision_id)
