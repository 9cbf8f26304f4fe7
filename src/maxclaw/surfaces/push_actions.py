"""Answering from a notification: a button (``opt:<id>``), the reply box (``other`` with
text), Revoke, or Take back (``retract``), with the user's bearer token or the notification's
action token. An action is an answer like any other: it settles the decision through the panel
(``via`` ``push``). An answer given with an action token comes back with ``take_back``: the
single-use ``retract`` token the confirmation's "Take back" button sends
(``push/action_tokens.py``)."""

from __future__ import annotations

import re
from typing import Any

from maxclaw.auth.service import Principal
from maxclaw.db.database import Database
from maxclaw.errors import Invalid
from maxclaw.push.action_tokens import ActionTokens
from maxclaw.push.adapters.base import Adapter
from maxclaw.push.dispatcher import Dispatcher
from maxclaw.push.service import PushService
from maxclaw.settings import Settings
from maxclaw.surfaces.panel import DecisionPanel

OPTION_ACTION = re.compile(r"^opt:(.+)$", re.DOTALL)
REVOKE_ACTION = "revoke"  # the Revoke button of "Main answered … for you"
RETRACT_ACTION = "retract"  # "Take back" on the confirmation of an answer from a notification


class PushActions(PushService):
    """Push (devices, adapters, dispatcher) plus the actions taken on its notifications."""

    def __init__(self, db: Database, settings: Settings, panel: DecisionPanel, *,
                 adapters: dict[str, Adapter], action_tokens: ActionTokens,
                 dispatcher: Dispatcher) -> None:
        super().__init__(db, settings, adapters=adapters, action_tokens=action_tokens,
                         dispatcher=dispatcher)
        self.panel = panel

    async def act(self, who: Principal, decision_id: int, action: str,
                  text: str | None) -> dict[str, Any]:
        """Answer a decision from a notification button or its reply box (via ``push``), or
        revoke Main's answer to it (``revoke``)."""
        if action == REVOKE_ACTION:
            return await self.panel.revoke(who, decision_id, via="push")
        if action == RETRACT_ACTION:
            return await self.panel.retract(who, decision_id)
        selected, note = parse_action(action, text)
        return await self.panel.settle(who, decision_id, selected, note, via="push")

    async def act_with_token(self, token: str, action: str, text: str | None,
                             decision_id: int | None = None) -> dict[str, Any]:
        """The same, with a notification's action token instead of a bearer token: the
        token is spent in the answer's transaction (``push/action_tokens.py`` lists
        refusals)."""
        if action == REVOKE_ACTION:
            who, token_decision, guard = await self.action_tokens.check(token, decision_id,
                                                                        scope="revoke")
            return await self.panel.revoke(who, token_decision, via="push", guard=guard)
        if action == RETRACT_ACTION:
            who, token_decision, guard = await self.action_tokens.check(token, decision_id,
                                                                        scope="retract")
            return await self.panel.retract(who, token_decision, guard=guard)
        selected, note = parse_action(action, text)
        window = self.panel.components.retractions.window
        who, token_decision, guard, take_back = await self.action_tokens.check_with_take_back(
            token, decision_id, window)
        decision = await self.panel.settle(who, token_decision, selected, note, via="push",
                                           guard=guard)
        if take_back:
            # the confirmation's "Take back" (a secret question has no token, so never here)
            decision = {**decision, "take_back": take_back}
        return decision


def parse_action(action: str, text: str | None) -> tuple[list[str], str | None]:
    """``opt:<id>`` or ``other`` (with text) as the card's ``selected`` and note."""
    note = text if text is not None and text.strip() else None
    match = OPTION_ACTION.match(action)
    if match:
        selected = [match.group(1)]
    elif action == "other":
        if note is None:
            raise Invalid.at(["body", "text"], "the reply box needs some text")
        selected = []
    else:
        raise Invalid.at(["body", "action"],
                         "must be 'opt:<option id>', 'other', 'revoke' or 'retract'")
    return selected, note
