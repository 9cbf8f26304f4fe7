"""The sweeps: due cards (to Main, or kept open with a carrier), cards nobody watches any more
(their carrier and push), expired cards, and cards whose time with Main is up (back to Max).
Each batch is set-wise — a fixed number of statements whatever its size (~8 per card took 14 s
for 10,000 due cards; docs/benchmarks.md) — and runs the same effect functions as a single move
(``components/effects.py``).

``SKIP LOCKED`` claims and the CAS let any number of sweepers run at once. Lock order, as the
answers take it: the claimed components, the tool rows ascending (``mirror_many``), the
carriers, then the woken threads in id order.
"""

from __future__ import annotations

from datetime import datetime

import asyncpg

from maxclaw.cards.definitions import Card
from maxclaw.cards.rules import main_may_take
from maxclaw.clock import Clock
from maxclaw.components import effects, store
from maxclaw.components import sweep_store as sweeps_sql
from maxclaw.components.effects import Moved
from maxclaw.components.machine import MAIN_TIMEOUT_NOTE, Status, Surface, statuses, transition
from maxclaw.components.moves import CardJob
from maxclaw.components.projections import (
    Key,
    StateColumns,
    card_of,
    definition_of,
    key_of,
    state_of,
    thread_of,
)
from maxclaw.components.rows import ComponentInContext
from maxclaw.db.database import Database
from maxclaw.metrics import Metrics
from maxclaw.prefs import store as prefs_store
from maxclaw.prefs.due import MAIN_TIMEOUT_MINUTES, card_due, main_due
from maxclaw.secrets.service import SecretService

SWEEP_TO_MAIN = transition("to-main", Surface.SWEEP)
SWEEP_KEEP = transition("keep-open", Surface.SWEEP)
SWEEP_EXPIRE = transition("expire", Surface.SWEEP)
SWEEP_UNWATCHED = transition("unwatched", Surface.SWEEP)
SWEEP_MAIN_TIMEOUT = transition("main-timeout", Surface.SWEEP)


async def _mirror(conn: asyncpg.Connection, rows: list[ComponentInContext],
                  new: dict[Key, StateColumns], rules: dict[Key, bool] | None = None) -> None:
    """The moved rows' ``display.states`` entries, one statement per batch."""
    patches: dict[store.ToolRow, dict[str, dict[str, object]]] = {}
    for row in rows:
        rule = rules[key_of(row)] if rules is not None else False
        patches.setdefault((row.user_id, row.tool_message_id), {})[row.id] = \
            state_of(new[key_of(row)], rule)
    await sweeps_sql.mirror_many(conn, patches)


def _claimed(rows: list[ComponentInContext], cards: dict[Key, Card]) -> list[Moved]:
    """Claimed rows as the effects take them (a sweep's move changes no column they read)."""
    return [Moved.of(r, r.status, cards[key_of(r)].component(r.id), r) for r in rows]


class Sweeps(CardJob):
    """sweep_due, sweep_unwatched, sweep_expired, sweep_main_timeout (one batch each) and
    their loops."""

    def __init__(self, db: Database, clock: Clock, metrics: Metrics, secrets: SecretService,
                 main_timeout_minutes: int = MAIN_TIMEOUT_MINUTES) -> None:
        super().__init__(db, clock, metrics, secrets)
        self.main_timeout_minutes = main_timeout_minutes  # the server's default

    async def sweep_due(self, limit: int = 500, now: datetime | None = None) -> dict[str, int]:
        """One batch: due cards go to Main where it may take them; the others stay open with
        a carrier."""
        now = now or self.clock.now()
        async with self.db.transaction() as conn:
            rows = await sweeps_sql.claim_due(conn, now, limit)
            if not rows:  # the common pass: one statement, nothing to move
                return {"handed_to_main": 0, "kept_open": 0}
            # a batch spans users, and ids are only unique per user: key by (user_id, id)
            cards = {key_of(r): card_of(r) for r in rows}
            takes = {key_of(r): main_may_take(cards[key_of(r)], thread_of(r)) for r in rows}
            # Main's time to decide each card it takes runs from now, by its user's setting
            prefs = await prefs_store.get_many(conn, [k[0] for k, t in takes.items() if t])
            moved = await sweeps_sql.sweep_move(
                conn, {k: main_due(prefs[k[0]], now, self.main_timeout_minutes)
                       for k, t in takes.items() if t},
                [k for k, t in takes.items() if not t],
                to_main_target=SWEEP_TO_MAIN.target.value, keep_target=SWEEP_KEEP.target.value,
                sources=statuses(SWEEP_TO_MAIN.sources | SWEEP_KEEP.sources))
            # the claim locked every row, so each one moved; the filter is belt and braces
            take = [r for r in rows if takes[key_of(r)] and key_of(r) in moved]
            keep = [r for r in rows if not takes[key_of(r)] and key_of(r) in moved]
            if take or keep:
                await _mirror(conn, take + keep, dict(moved))
                # carriers first (kept cards, then handed ones), then Main's threads
                await effects.run(conn, SWEEP_KEEP, _claimed(keep, cards), self.secrets)
                await effects.run(conn, SWEEP_TO_MAIN, _claimed(take, cards), self.secrets)
                # a kept card's status does not change, so it has no audit row
                await sweeps_sql.audit_many(conn, [(r.user_id, r.id) for r in take],
                                       from_status=Status.OPEN.value,
                                       to_status=SWEEP_TO_MAIN.target.value,
                                       actor=SWEEP_TO_MAIN.actor.value)
        self.metrics.sweeps.labels("handed_to_main").inc(len(take))
        self.metrics.sweeps.labels("kept_open").inc(len(keep))
        return {"handed_to_main": len(take), "kept_open": len(keep)}

    async def sweep_expired(self, limit: int = 500, now: datetime | None = None) -> int:
        """One batch of the ``expire`` row (each card expires once however many sweepers
        run)."""
        t = SWEEP_EXPIRE
        async with self.db.transaction() as conn:
            rows = await sweeps_sql.claim_expired(conn, now or self.clock.now(), limit)
            if not rows:
                return 0
            # the tool rows before the move, in the order answers lock them (component, tool
            # row, and only at commit the thread: threads.open_cards)
            await sweeps_sql.lock_tool_rows(conn, [(r.user_id, r.tool_message_id) for r in rows])
            moved = await sweeps_sql.expire_move(conn, [key_of(r) for r in rows], t.target.value,
                                            t.source_list())
            rows = [r for r in rows if key_of(r) in moved]
            await _mirror(conn, rows, dict(moved))
            await effects.run(conn, t, [
                Moved.of(moved[key_of(r)], r.status, definition_of(r), r) for r in rows],
                self.secrets)
            for source in sorted({r.status for r in rows}):
                await sweeps_sql.audit_many(conn, [(r.user_id, r.id) for r in rows
                                              if r.status == source],
                                       from_status=source, to_status=t.target.value,
                                       actor=t.actor.value)
        self.metrics.sweeps.labels("expired").inc(len(rows))
        return len(rows)

    async def sweep_main_timeout(self, limit: int = 500, now: datetime | None = None) -> int:
        """One batch of the ``main-timeout`` row: cards with Main whose time to decide is up
        (``main_due_at``) go back to Max as a hand-back with the note "Main did not decide":
        the asking thread's history row, a push to Max (his quiet hours apply, as to every
        push) and an event in Main's thread. The claim (``SKIP LOCKED``, the status re-read
        under the lock) and the CAS make each card hand back once, with one push, however many
        sweepers run."""
        t = SWEEP_MAIN_TIMEOUT
        async with self.db.transaction() as conn:
            rows = await sweeps_sql.claim_main_timeout(conn, now or self.clock.now(), limit)
            if not rows:
                return 0
            # the tool rows before the move, in the order answers lock them
            await sweeps_sql.lock_tool_rows(conn, [(r.user_id, r.tool_message_id) for r in rows])
            moved = await sweeps_sql.main_timeout_move(conn, [key_of(r) for r in rows],
                                                       t.target.value, t.source_list(),
                                                       MAIN_TIMEOUT_NOTE)
            rows = [r for r in rows if key_of(r) in moved]
            await _mirror(conn, rows, dict(moved))
            await effects.run(conn, t, [
                Moved.of(moved[key_of(r)], r.status, definition_of(r), r,
                         note=MAIN_TIMEOUT_NOTE) for r in rows], self.secrets)
            await sweeps_sql.audit_many(conn, [(r.user_id, r.id) for r in rows],
                                        from_status=Status.WITH_MAIN.value,
                                        to_status=t.target.value, actor=t.actor.value)
        self.metrics.sweeps.labels("main_timed_out").inc(len(rows))
        return len(rows)

    async def sweep_main_timeout_all(self, limit: int = 500) -> int:
        total = 0
        while True:
            n = await self.sweep_main_timeout(limit)
            total += n
            if n < limit:
                return total

    async def sweep_unwatched(self, limit: int = 500, now: datetime | None = None) -> int:
        """One batch of the ``unwatched`` row: cards posted while Max watched their thread (no
        carrier, due in an hour) whose thread nobody watches any more — his presence lapsed
        or he left — get their carrier and its push, and a due time of
        ``main_after_minutes`` from now. The claim's ``decision_id IS NULL`` makes each card
        judged once however many sweepers run."""
        t = SWEEP_UNWATCHED
        now = now or self.clock.now()
        async with self.db.transaction() as conn:
            rows = await sweeps_sql.claim_unwatched(conn, now, limit)
            if not rows:
                return 0
            cards = {key_of(r): card_of(r) for r in rows}
            # his settings decide the clock (his default minutes, quiet hours; issue 29)
            prefs = await prefs_store.get_many(conn, [r.user_id for r in rows])
            due = {k: card_due(prefs[k[0]], c, start=now, watched=False)
                   for k, c in cards.items()}
            moved = await sweeps_sql.unwatched_move(conn, due, t.source_list(), now)
            rows = [r for r in rows if key_of(r) in moved]
            rules = {key_of(r): main_may_take(cards[key_of(r)], thread_of(r)) for r in rows}
            await _mirror(conn, rows, dict(moved), rules)
            await effects.run(conn, t, _claimed(rows, cards), self.secrets)
        self.metrics.sweeps.labels("unwatched").inc(len(rows))
        return len(rows)

    async def sweep_unwatched_all(self, limit: int = 500) -> int:
        total = 0
        while True:
            n = await self.sweep_unwatched(limit)
            total += n
            if n < limit:
                return total

    async def sweep_expired_all(self, limit: int = 500) -> int:
        total = 0
        while True:
            n = await self.sweep_expired(limit)
            total += n
            if n < limit:
                return total

    async def sweep_due_all(self, limit: int = 500) -> dict[str, int]:
        """Sweep batches until nothing is due (``maxclaw sweep``)."""
        total = {"handed_to_main": 0, "kept_open": 0}
        while True:
            result = await self.sweep_due(limit)
            for key in total:
                total[key] += result[key]
            if sum(result.values()) < limit:
                return total
