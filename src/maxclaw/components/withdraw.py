"""The asking agent ends its own questions: ``withdraw_question`` and ``supersedes``."""

from __future__ import annotations

import asyncpg

from maxclaw.auth.service import Principal
from maxclaw.components import store
from maxclaw.components.machine import Surface, transition
from maxclaw.components.moves import CardJob
from maxclaw.components.projections import definition_of
from maxclaw.errors import NotFound


class Withdrawals(CardJob):
    """withdraw (and supersede), and the lookups the tool needs to name what it withdraws."""

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
            row = await self.load(conn, who.user_id, component_id)
            if row.thread_id != thread_id:
                raise NotFound("No question of this conversation has that id.")
            if row.status == t.target:
                done["already"].append(component_id)
                continue
            new = await self.move(conn, who.user_id, component_id, t,
                                  withdrawn_reason=reason, superseded_by=superseded_by,
                                  token_id=who.token_id)
            if new is None:
                raise await self.refuse(conn, who.user_id, component_id, t)
            await self.effects(conn, t, new, definition_of(row), row)
            done["withdrawn"].append(component_id)
        return done

    async def in_thread(self, conn: asyncpg.Connection, user_id: str, thread_id: str,
                        component_id: str) -> bool:
        """Whether ``component_id`` is a question of ``thread_id``."""
        row = await store.get_with_context(conn, user_id, component_id)
        return row is not None and row.thread_id == thread_id

    async def card_component_ids(self, conn: asyncpg.Connection, user_id: str, thread_id: str,
                                 tool_call_id: str) -> list[str]:
        """The component ids of the card ``tool_call_id`` posted in ``thread_id``."""
        return [r.id for r in await store.card_components(conn, user_id, thread_id,
                                                          tool_call_id)]
