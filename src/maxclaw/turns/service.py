"""TurnService: claim, heartbeat, inbox, finish — where queued work meets an agent runtime.

User messages, answers, hand-offs and events all enter a thread one way: an input row (role
``user`` or ``event``, ``delivered_at`` null) plus ``wake_thread``, which queues a turn unless
one is queued or running. A runtime claims the turn and gets the whole thread as model-facing
history; from then on everything new waits in the inbox until the runtime's next step boundary
(``inbox``). ``finish`` closes the turn and, if input arrived after the last delivery, queues
the next turn at once, so nothing is stranded.

Time points on each component: ``posted_at`` (the tool returned), ``answered_at`` (the answer
arrived), ``seen_at`` (stamped here, the first time a model is handed the answer).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from maxclaw.auth.service import Principal, parse_int_id, parse_uuid
from maxclaw.clock import Clock
from maxclaw.db.database import Database
from maxclaw.errors import Conflict, NotFound, TurnStopped
from maxclaw.secrets.service import SecretService
from maxclaw.timeline import store as timeline_store
from maxclaw.timeline.projections import thread_projection
from maxclaw.timeline.rows import MessageRow
from maxclaw.turns import store as store
from maxclaw.turns.history import (
    answered_components,
    chat_history,
    chat_message,
    forged_notice,
    whole_groups,
)
from maxclaw.turns.listener import TurnListener
from maxclaw.turns.rows import TurnRow
from maxclaw.wire.models import Finished, StoppedTurn

log = logging.getLogger("maxclaw.turns.service")
POLL_S = 1.0  # a waiting claim retries this often even without a NOTIFY (and lapses leases)
LAPSE_BATCH = 100
# The model window (claim, each history page): the newest rows up to these caps, whole
# tool-call groups; older rows are read with the cursor (settings: model_window_rows/_bytes).
WINDOW_ROWS = 500
WINDOW_BYTES = 2 * 1024 * 1024
STOPPED = ("Max stopped this turn: stop now and write nothing more. Input that waits stays "
           "queued; his next message starts a new turn.")
NOT_RUNNING = ("This turn is no longer running (it finished, or its lease lapsed and the work "
               "was queued again): stop, and claim a new turn.")


def parse_turn_id(value: str | int) -> int:
    """A turn id from a path; a malformed one names nothing (404), like a missing one."""
    return parse_int_id(value, "turn")


def turn_projection(turn: TurnRow) -> dict[str, Any]:
    return {"id": turn.id, "thread_id": turn.thread_id, "lease_until": turn.lease_until}


class TurnService:
    """Turns of agent runtimes: claim (long-poll), lease, inbox, finish, history."""

    def __init__(self, db: Database, clock: Clock, listener: TurnListener,
                 secrets: SecretService, *, lease_s: float = 60.0,
                 poll_s: float = POLL_S, window_rows: int = WINDOW_ROWS,
                 window_bytes: int = WINDOW_BYTES) -> None:
        self.db = db
        self.secrets = secrets  # opens sealed rows for the model (claim, inbox, history)
        self.clock = clock
        self.listener = listener
        self.lease = timedelta(seconds=lease_s)
        self.poll_s = poll_s
        self.window_rows = window_rows  # the model window's cap (claim, history pages)
        self.window_bytes = window_bytes
        self._last_lapse_check = float("-inf")

    # ----- claim -----

    async def claim(self, who: Principal, wait_s: float, runtime_id: str | None,
                    still_wanted: Callable[[], Awaitable[bool]] | None = None,
                    thread_ids: list[str] | None = None) -> dict[str, Any] | None:
        """The oldest queued turn the caller may run, waiting up to ``wait_s`` for one;
        ``thread_ids`` narrows it to those threads (a bridge serves only the threads it runs
        a host for, even with an unbound token)."""
        among = [parse_uuid(t) for t in thread_ids] if thread_ids is not None else None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        if runtime_id:  # the echo guard: stored on the turn as written
            async with self.db.connection() as conn:
                await self.secrets.refuse_user_echo(conn, who.user_id, {"runtime_id": runtime_id})
        if wait_s > 0:
            await self.listener.ensure_listening()
        # register before looking, so a NOTIFY between the look and the wait is not missed
        with self.listener.waiter(who.user_id) as woken:
            while True:
                woken.clear()
                await self._lapse_expired_now_and_then()
                claimed = await self._claim_once(who, runtime_id or "anonymous", among)
                if claimed is not None:
                    return claimed
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return None
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken.wait(), min(remaining, self.poll_s))
                # a caller that hung up must not be handed a turn it will never run
                if still_wanted is not None and not await still_wanted():
                    return None
                if wait_s > 0 and not self.listener.listening:
                    await self.listener.ensure_listening()

    async def _claim_once(self, who: Principal, runtime_id: str,
                          among: list[str] | None = None) -> dict[str, Any] | None:
        """``_claim_attempt``, again when a retract took back an answer the attempt had read
        (it wrote nothing then: its transaction rolled back)."""
        while True:
            try:
                return await self._claim_attempt(who, runtime_id, among)
            except _TakenBack:
                continue

    async def _claim_attempt(self, who: Principal, runtime_id: str,
                             among: list[str] | None = None) -> dict[str, Any] | None:
        """Lock a queued turn, hand its thread over, then start it. The turn is written last
        so that nothing waiting on it (a wake-up) holds a component this claim stamps."""
        now = self.clock.now()
        async with self.db.transaction() as conn:
            picked = await store.pick_next(conn, who.user_id, who.thread_id,
                                           with_main=who.writes_in_main, among=among)
            if picked is None:
                return None
            rows, next_before_id = await self._window(conn, who.user_id, picked.thread_id,
                                                      None, handed_only=False)
            model_rows = await self.secrets.model_rows(conn, who.user_id, rows)
            head = rows[-1].id if rows else 0
            # all input up to the head is delivered, the window's and any older (which the
            # cursor reaches); seen_at only for answers the window hands over
            await store.deliver_through(conn, who.user_id, picked.thread_id, head, now)
            # the window was read before its rows were locked (the delivery above locks them):
            # a retract that took one of its answers back first wins, and this claim reads again
            if await store.taken_back(conn, who.user_id, [
                    r.id for r in rows if _undelivered_input(r)]):
                raise _TakenBack
            await store.stamp_seen(conn, who.user_id, answered_components(
                r for r in rows if _undelivered_input(r)), now)
            turn = await store.start_turn(conn, who.user_id, picked.id, runtime_id, now,
                                          now + self.lease, head)
            # read after the start: the thread's turn_state now says running
            thread = await timeline_store.get_thread(conn, who.user_id, picked.thread_id)
        assert thread is not None  # the turn's foreign key guarantees it
        log.info("turn claimed", extra={"turn_id": turn.id, "thread_id": turn.thread_id,
                                        "user_id": who.user_id})
        # "input": what this claim delivered for the first time (it is in "messages" too), for
        # a client that hands a host only what is new (the bridge)
        return {"turn": turn_projection(turn), "thread": thread_projection(thread),
                "messages": chat_history(model_rows), "next_before_id": next_before_id,
                "input": [chat_message(r) for r in model_rows if _undelivered_input(r)]}

    async def _window(self, conn: asyncpg.Connection, user_id: str, thread_id: str,
                      before_id: int | None, *, handed_only: bool,
                      ) -> tuple[list[MessageRow], int | None]:
        """The model window before ``before_id`` (None: the head), whole tool-call groups, and
        the cursor to the rows older than it (None when there are none). ``handed_only``
        (history) leaves out input not delivered yet; it is dropped here rather than in the
        query, so the query never reads past its cap, however much input waits."""
        rows = whole_groups(await store.model_window(
            conn, user_id, thread_id, before_id, self.window_rows, self.window_bytes))
        rows = [r for r in rows if not _retracted(r)]  # taken back: no model ever reads it
        if not rows:
            return [], None
        older = await store.has_before(conn, user_id, thread_id, rows[0].id)
        cursor = rows[0].id if older else None
        if handed_only:
            rows = [r for r in rows if not _undelivered_input(r)]
        return rows, cursor

    async def _deliver(self, conn: asyncpg.Connection, user_id: str,
                       delivered: list[MessageRow], now: datetime) -> None:
        """Record what the model was just handed: input delivered, answers seen."""
        await store.mark_delivered(conn, user_id, [r.id for r in delivered], now)
        await store.stamp_seen(conn, user_id, answered_components(delivered), now)

    # ----- the running turn -----

    async def _running(self, conn: asyncpg.Connection, who: Principal,
                       turn_id: int) -> TurnRow:
        """The caller's turn, locked; 404 if it is not theirs, 409 if it is not running."""
        turn = await store.lock_turn(conn, who.user_id, turn_id)
        if turn is None:
            raise NotFound("No such turn.")
        who.check_thread(turn.thread_id)
        # a turn in Main is Main's own runtime's: another agent token may not heartbeat,
        # take its inbox (Main would never see that input) or finish it. One lookup, and only
        # for the tokens the fence is about.
        if not who.writes_in_main and await store.is_main(conn, who.user_id, turn.thread_id):
            who.check_writes_in("main")
        if turn.status == "stopped":
            raise TurnStopped(STOPPED, data={"status": turn.status})
        if turn.status != "running":
            raise Conflict(NOT_RUNNING, data={"status": turn.status})
        return turn

    async def stop(self, who: Principal, thread_id: str) -> StoppedTurn:
        """Max's Stop: the thread's running turn ends ``stopped`` at once, so the runtime's
        next write (message, heartbeat, inbox, finish) is ``409 turn_stopped``. Nothing is
        queued in its place: waiting input stays queued (a new message starts a new turn),
        open cards stay open. ``409 conflict`` when no turn is running."""
        thread_id = parse_uuid(thread_id)
        async with self.db.transaction() as conn:
            if await timeline_store.get_thread(conn, who.user_id, thread_id) is None:
                raise NotFound("No such thread.")
            turn = await store.stop_turn(conn, who.user_id, thread_id, self.clock.now())
        if turn is None:
            raise Conflict("No turn is running in this thread; nothing was stopped.")
        log.info("turn stopped", extra={"turn_id": turn.id, "thread_id": thread_id,
                                        "user_id": who.user_id})
        assert turn.finished_at is not None
        return StoppedTurn(thread_id=thread_id, turn_id=turn.id, finished_at=turn.finished_at)

    async def heartbeat(self, who: Principal, turn_id: int) -> dict[str, Any]:
        """Extend the lease; a lease that already ran out lapses the turn instead (409)."""
        now = self.clock.now()
        async with self.db.transaction() as conn:
            turn = await self._running(conn, who, turn_id)
            extended = None
            if turn.lease_until is not None and turn.lease_until >= now:  # running: set
                extended = await store.extend_lease(conn, who.user_id, turn_id, now + self.lease)
            else:
                await store.lapse_if_expired(conn, who.user_id, turn_id, now)
        # raised after the commit, so the lapse and its successor turn stay written
        if extended is None:
            raise Conflict(NOT_RUNNING, data={"status": "lapsed"})
        return {"lease_until": extended.lease_until}

    async def inbox(self, who: Principal, turn_id: int) -> dict[str, Any]:
        """The step boundary: what arrived since the last delivery, now marked delivered."""
        now = self.clock.now()
        async with self.db.transaction() as conn:
            turn = await self._running(conn, who, turn_id)
            user_id, thread_id = who.user_id, turn.thread_id
            # the model's own service-shaped text written since it last saw the thread
            forged = await store.forged_since(conn, user_id, thread_id, turn.delivered_through)
            rows = await store.undelivered_rows(conn, user_id, thread_id)
            model_rows = await self.secrets.model_rows(conn, user_id, rows)
            last = await store.last_message_id(conn, user_id, thread_id)
            await self._deliver(conn, user_id, rows, now)
            # how far into the thread the model has read (the forged-notice check starts here)
            await store.set_delivered_through(conn, user_id, turn_id, last)
        messages = [forged_notice()] if forged else []
        messages.extend(chat_message(r) for r in model_rows)
        if rows or forged:
            log.info("inbox delivered", extra={"turn_id": turn_id, "thread_id": thread_id,
                                               "count": len(rows)})
        return {"messages": messages}

    async def finish(self, who: Principal, turn_id: int) -> Finished:
        """End the turn; input that arrived after the last delivery (or a forged notice the
        model has not been told about) queues the next turn at once."""
        now = self.clock.now()
        async with self.db.transaction() as conn:
            turn = await self._running(conn, who, turn_id)
            # Lock the thread first: an input row being inserted right now (its foreign key
            # holds FOR KEY SHARE on the thread) commits before we look, or waits until we are
            # done and then finds the thread idle and wakes it itself. Either way it is seen.
            await store.lock_thread(conn, who.user_id, turn.thread_id)
            await store.finish_turn(conn, who.user_id, turn_id, now)
            requeued = await self._queue_next(conn, who.user_id, turn)
            open_ids = await store.open_components(conn, who.user_id, turn.thread_id)
        log.info("turn finished", extra={"turn_id": turn_id, "thread_id": turn.thread_id,
                                         "count": len(open_ids)})
        return Finished(open_components=open_ids, requeued=requeued)

    async def _queue_next(self, conn: asyncpg.Connection, user_id: str,
                          turn: TurnRow) -> bool:
        """Queue the next turn if input is waiting, or if the model wrote a forged notice
        since its last delivery (it concluded something on it and must be told: the claim's
        history carries the notice) — but not twice in a row for forged notices alone, or a
        model that forges on every turn would run forever."""
        thread_id = turn.thread_id
        if await store.has_undelivered(conn, user_id, thread_id):
            await timeline_store.wake_thread(conn, user_id, thread_id)
            return True
        if not await store.forged_since(conn, user_id, thread_id, turn.delivered_through):
            return False
        if turn.forged_requeue:
            log.warning("the model forged a notice again; no further turn is queued for it",
                        extra={"turn_id": turn.id, "thread_id": thread_id,
                               "user_id": user_id})
            return False
        await store.wake_for_forged(conn, user_id, thread_id)
        return True

    # ----- reading -----

    async def history(self, who: Principal, thread_id: str,
                      before_id: int | None = None) -> dict[str, Any]:
        """What a model of this thread has been handed so far (pending input is in the inbox):
        the model window before ``before_id`` (None: the newest), and ``next_before_id``, the
        cursor for the page before it (None on the oldest page)."""
        thread_id = parse_uuid(thread_id)
        who.check_thread(thread_id)
        async with self.db.transaction() as conn:  # read-only; the window's plan setting
            if await timeline_store.get_thread(conn, who.user_id, thread_id) is None:
                raise NotFound("No such thread.")
            rows, next_before_id = await self._window(conn, who.user_id, thread_id, before_id,
                                                      handed_only=True)
            rows = await self.secrets.model_rows(conn, who.user_id, rows)
        return {"messages": chat_history(rows), "next_before_id": next_before_id}

    # ----- leases -----

    async def lapse_expired(self, limit: int = LAPSE_BATCH) -> int:
        """Lapse running turns whose lease ran out and queue their work again (any user)."""
        async with self.db.transaction() as conn:
            lapsed = await store.lapse_expired(conn, self.clock.now(), limit)
        for turn in lapsed:
            log.warning("turn lease lapsed; work queued again",
                        extra={"turn_id": turn.id, "thread_id": turn.thread_id,
                               "user_id": turn.user_id})
        return len(lapsed)

    async def _lapse_expired_now_and_then(self) -> None:
        # at most once per poll interval per process: claims are frequent, lapses are rare
        now = asyncio.get_running_loop().time()
        if now - self._last_lapse_check >= self.poll_s:
            self._last_lapse_check = now
            await self.lapse_expired()


class _TakenBack(Exception):
    """A retract took back an answer the claim's window held (``_claim_once`` reads again)."""


def _retracted(row: MessageRow) -> bool:
    return bool(row.source_meta) and "retracted" in (row.source_meta or {})


def _undelivered_input(row: MessageRow) -> bool:
    return row.role in ("user", "event") and row.delivered_at is None
