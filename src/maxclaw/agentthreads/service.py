"""AgentThreadService: an agent's threads outside a turn — the thread's inbox, its cards, and a
new thread — for agents that are not run by a MaxClaw runtime (MCP hosts, command hooks).

``inbox`` is the step boundary of an agent that has no turn: what arrived since the last
delivery (answers, hand-offs, revokes, events, Max's messages), marked delivered and the
answers' ``seen_at`` stamped in the same transaction, exactly as a running turn's inbox does.
The turn an arrival queued is retired with it (queued → done): its input has been delivered,
so no runtime should run it again. While a runtime is *running* a turn in the thread, that
turn's inbox is the one that delivers, and this one answers ``409 conflict``.
"""

from __future__ import annotations

from typing import Any

from maxclaw.agentthreads import store
from maxclaw.auth.service import Principal, parse_uuid
from maxclaw.clock import Clock
from maxclaw.components.service import component_projection, definition_of
from maxclaw.db.database import Database
from maxclaw.errors import Conflict, Forbidden, NotFound
from maxclaw.secrets.service import SecretService
from maxclaw.timeline import store as timeline_store
from maxclaw.timeline.service import TimelineService, check_limit
from maxclaw.turns import store as turn_store
from maxclaw.turns.history import answered_components, chat_message
from maxclaw.wire.models import Components, Thread

RUNNING = ("A runtime is running a turn in this thread; that turn's inbox delivers what "
           "arrives, at its next step.")


class AgentThreadService:
    """``/v1/agent/threads`` outside a turn: create, inbox, components."""

    def __init__(self, db: Database, clock: Clock, timeline: TimelineService,
                 secrets: SecretService) -> None:
        self.db = db
        self.clock = clock
        self.timeline = timeline
        self.secrets = secrets  # opens sealed secret answers for the model (get_answers)

    async def create_thread(self, who: Principal, title: str, kind: str) -> Thread:
        """A new thread of the agent's user (an unbound token only: a bound one has its thread)."""
        if who.thread_id is not None:
            raise Forbidden("A thread-bound agent token cannot create threads; it has its own.")
        if title:  # the echo guard: a title is shown everywhere and never masked
            async with self.db.connection() as conn:
                await self.secrets.refuse_user_echo(conn, who.user_id, {"title": title})
        return await self.timeline.create_thread(who, title, kind, None)

    async def inbox(self, who: Principal, thread_id: str) -> dict[str, Any]:
        """What arrived since the last delivery, now delivered (``{"messages": [ChatMessage]}``)."""
        thread_id = parse_uuid(thread_id)
        who.check_thread(thread_id)
        now = self.clock.now()
        async with self.db.transaction() as conn:
            thread = await timeline_store.get_thread(conn, who.user_id, thread_id)
            if thread is None:
                raise NotFound("No such thread.")
            # taking Main's inbox is a write (Main would never be handed that input)
            who.check_writes_in(thread.kind)
            # the tool rows of answers about to be seen first (their seen_at is mirrored there),
            # in the order an answer locks them: before the thread, never after it
            await turn_store.lock_unseen_tool_rows(conn, who.user_id, thread_id)
            # the thread, as a wake-up does; then its turn, so a claim cannot start it
            await turn_store.lock_thread(conn, who.user_id, thread_id)
            turn = await store.lock_active_turn(conn, who.user_id, thread_id)
            if turn is not None and turn.status == "running":
                raise Conflict(RUNNING, data={"turn_id": turn.id})
            rows = await turn_store.undelivered_rows(conn, who.user_id, thread_id)
            await turn_store.mark_delivered(conn, who.user_id, [r.id for r in rows], now)
            await turn_store.stamp_seen(conn, who.user_id, answered_components(rows), now)
            if rows and turn is not None:
                await store.retire_queued_turn(conn, who.user_id, turn.id, now)
            model_rows = await self.secrets.model_rows(conn, who.user_id, rows)
        return {"messages": [chat_message(r) for r in model_rows]}

    async def components(self, who: Principal, thread_id: str,
                         limit: int = 100) -> Components:
        """The thread's cards with their states, oldest first (never a secret answer)."""
        thread_id = parse_uuid(thread_id)
        who.check_thread(thread_id)
        async with self.db.connection() as conn:
            if await timeline_store.get_thread(conn, who.user_id, thread_id) is None:
                raise NotFound("No such thread.")
            rows = await store.thread_cards(conn, who.user_id, thread_id, check_limit(limit))
        return Components.model_validate(
            {"components": [component_projection(r, definition_of(r)) for r in rows]})
