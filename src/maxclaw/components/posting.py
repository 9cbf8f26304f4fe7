"""Posting cards (``ask_user_question``) and reading them back."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from maxclaw.auth.service import Principal
from maxclaw.cards.definitions import Card
from maxclaw.cards.rules import main_may_take
from maxclaw.components import post_store, store
from maxclaw.components.machine import UNSETTLED, statuses
from maxclaw.components.moves import CardJob
from maxclaw.components.projections import (
    card_of,
    component_projection,
    posted_state,
    thread_facts,
    thread_of,
)
from maxclaw.components.rows import NewComponent
from maxclaw.decisions import carriers
from maxclaw.prefs import store as prefs_store
from maxclaw.prefs.due import card_due
from maxclaw.prefs.rows import PrefsRow
from maxclaw.timeline import store as timeline_store
from maxclaw.timeline.rows import MessageRow, ThreadRow

# Builds a posted card's tool-row content from its components' due time (None: never to Main
# by time); the caller owns the wording (server_tools), the service the due time.
ContentFor = Callable[[datetime | None], dict[str, Any]]


class Posting(CardJob):
    """post_card and card_rows (what posting writes); get and open_components."""

    async def get(self, who: Principal, component_id: str) -> dict[str, Any]:
        """One component with its definition and state."""
        async with self.db.connection() as conn:
            row = await self.load(conn, who.user_id, component_id)
        who.check_thread(row.thread_id)
        card = card_of(row)
        return component_projection(row, card.component(component_id),
                                    main_may_take(card, thread_of(row)))

    async def open_components(self, user_id: str, thread_id: str) -> list[str]:
        """Ids of the thread's cards that are not settled (what ``finish`` reports)."""
        async with self.db.connection() as conn:
            return await store.thread_components(conn, user_id, thread_id,
                                                 statuses(UNSETTLED))

    async def post_card(self, conn: asyncpg.Connection, *, user_id: str, thread: ThreadRow,
                        card: Card, assistant_message_id: int, turn_id: int | None,
                        content_for: ContentFor, watching: bool | None = None) -> MessageRow:
        """Create a card's rows inside the caller's transaction; returns the tool row.

        ``content_for(due_ats)`` builds the tool row's content from the components' due times.
        Due time: one hour if Max is watching the thread (no carrier), else
        ``main_after_minutes`` (and a carrier, which pushes). ``watching``: when the caller
        read it already (in the same transaction); None reads it here.
        """
        if watching is None:  # one read: presence and his settings
            watching, prefs = await post_store.posting_facts(conn, user_id, thread.id,
                                                             self.clock.now())
        else:
            prefs = await prefs_store.get(conn, user_id)
        plan = self.card_rows(user_id, thread, card, watching, content_for, prefs)
        tool_row = await timeline_store.insert_message(
            conn, user_id=user_id, thread_id=thread.id, role="tool",
            tool_call_id=card.tool_call_id, content=plan.content, display=plan.display,
            source_meta=post_store.ASK_TOOL_META, turn_id=turn_id)
        # the carriers (and their pushes) of every question in two statements, however many
        facts = thread_facts(thread)
        decision_ids = {} if watching else await carriers.ensure_carriers(
            conn, [(user_id, c, facts) for c in card.components])
        await post_store.insert_components(conn, [
            replace(row, message_id=assistant_message_id, tool_message_id=tool_row.id,
                    decision_id=decision_ids.get((user_id, row.id)))
            for row in plan.components])
        return tool_row

    def card_rows(self, user_id: str, thread: ThreadRow, card: Card, watching: bool,
                  content_for: ContentFor,
                  prefs: PrefsRow | None = None) -> post_store.CardRows:
        """What posting ``card`` writes, computed before anything is written: the tool row's
        content and display, the component rows (without their message ids and carrier) and,
        unless Max watches the thread, each question's carrier and its push payload.
        ``prefs``: his settings (his default minutes, quiet hours); None: the defaults."""
        now = self.clock.now()
        # main_after_minutes null: never to Main by time (Max can still let Main decide); the
        # clock pauses in his quiet hours unless he lets Main answer during them
        due_at = card_due(prefs or PrefsRow(user_id=user_id), card, start=now,
                          watched=watching)
        expires_at = (None if card.expires_after_minutes is None
                      else now + timedelta(minutes=card.expires_after_minutes))
        facts = thread_facts(thread)
        rule = main_may_take(card, facts)
        states = {c.id: posted_state(due_at, expires_at, rule) for c in card.components}
        rows = [NewComponent(id=c.id, user_id=user_id, thread_id=thread.id, kind=c.kind,
                             stakes=c.stakes, sensitive=c.sensitive, due_at=due_at,
                             expires_at=expires_at, due_from=now) for c in card.components]
        return post_store.CardRows(
            tool_call_id=card.tool_call_id, content=content_for(due_at),
            display={"v": 1, "kind": "components", "states": states}, components=rows,
            carriers=[] if watching else carriers.carrier_rows(user_id, card.components, facts))
