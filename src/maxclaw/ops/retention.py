"""Retention: delete rows nobody needs any more, table by table, in small batches.

Each rule names one kind of row, the setting that says how many days it is kept (``0`` keeps
it forever) and the SQL that picks it. Every rule's ``WHERE`` also says what it never picks:

* ``push_outbox`` — only ``sent`` and ``dead`` rows, never a row of a decision that is still
  open, never a row of a (decision, device) pair that still has a ``pending``/``sending`` row
  (the dispatcher orders a pair's rows by id).
* ``component_audit`` — only the trail of a settled component (the transitions table's
  ``SETTLED``: answered, main-answered, withdrawn, expired); a card that can still move (open,
  with Main, handed back, revoked) keeps its whole trail.
* ``turns`` — only ``done`` and ``lapsed`` turns, and never the newest turn of a thread.
* ``presence`` — rows whose TTL ran out (a live connection refreshes its row);
* ``ws_tickets`` — WebSocket tickets past their expiry (a ticket is good for seconds).
* ``runtime_leases`` — runtime leases that lapsed (one per runtime that stopped; its jobs
  were ended as lost when it lapsed, so nothing refers to it).

Messages, threads, decisions and components are history the user reads: they are never pruned.
One replica prunes at a time (a transaction-scoped advisory lock, so it works behind PgBouncer
in transaction mode); the others skip the round.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from maxclaw.clock import Clock
from maxclaw.components.machine import SETTLED, statuses
from maxclaw.db.database import Database
from maxclaw.jobs import PeriodicJob
from maxclaw.metrics import Metrics
from maxclaw.settings import Settings

log = logging.getLogger("maxclaw.ops.retention")

# pg_try_advisory_xact_lock key: one pruning replica at a time (per database)
PRUNE_LOCK = 7356003

# component statuses after which nothing changes any more: the table's, never a copy (a copy
# drifted once and pruned a revoked card's trail while keeping withdrawn and expired ones).
# Enum values, not input, so they may be written into the statement.
SETTLED_COMPONENT = tuple(statuses(SETTLED))
_SETTLED_SQL = ", ".join(f"'{s}'" for s in SETTLED_COMPONENT)


@dataclass(frozen=True)
class Rule:
    """One kind of prunable row."""

    name: str  # what `maxclaw prune` prints
    table: str
    key: str  # the column the batch deletes by
    setting: str  # Settings field: days kept (0 keeps forever)
    where: str  # over alias ``x``; ``$1`` is the cutoff time

    def count_sql(self) -> str:
        return f"SELECT count(*) FROM {self.table} AS x WHERE {self.where}"

    def delete_sql(self) -> str:
        return (f"DELETE FROM {self.table} WHERE {self.key} IN ("
                f"SELECT x.{self.key} FROM {self.table} AS x WHERE {self.where} LIMIT $2)")


_OUTBOX_GUARDS = """
  AND NOT EXISTS (SELECT 1 FROM decisions AS d
                   WHERE d.id = x.decision_id AND d.user_id = x.user_id AND d.status = 'open')
  AND NOT EXISTS (SELECT 1 FROM push_outbox AS p
                   WHERE p.decision_id = x.decision_id AND p.device_id = x.device_id
                     AND p.user_id = x.user_id AND p.status IN ('pending', 'sending'))"""

RULES: tuple[Rule, ...] = (
    Rule("push_outbox.sent", "push_outbox", "id", "retention_outbox_sent_days",
         "x.status = 'sent' AND coalesce(x.sent_at, x.created_at) < $1" + _OUTBOX_GUARDS),
    Rule("push_outbox.dead", "push_outbox", "id", "retention_outbox_dead_days",
         "x.status = 'dead' AND x.created_at < $1" + _OUTBOX_GUARDS),
    Rule("component_audit", "component_audit", "id", "retention_audit_days",
         "x.at < $1 AND NOT EXISTS (SELECT 1 FROM message_components AS c"
         " WHERE c.id = x.component_id AND c.user_id = x.user_id"
         f" AND c.status NOT IN ({_SETTLED_SQL}))"),
    Rule("turns", "turns", "id", "retention_turns_days",
         "x.status IN ('done', 'lapsed', 'stopped') AND x.finished_at < $1"
         " AND EXISTS (SELECT 1 FROM turns AS n"
         " WHERE n.user_id = x.user_id AND n.thread_id = x.thread_id AND n.id > x.id)"),
    Rule("presence", "presence", "connection_id", "retention_presence_days",
         "x.expires_at < $1"),
    Rule("ws_tickets", "ws_tickets", "ticket_hash", "retention_ws_tickets_days",
         "x.expires_at < $1"),
    # a lapsed lease holds no job (the lapse deleted them) and is never active again
    Rule("runtime_leases", "runtime_leases", "id", "retention_runtime_leases_days",
         "x.status = 'lapsed' AND x.lapsed_at < $1"),
)


class Pruner:
    """Counts (``dry_run``) or deletes what the retention settings let go."""

    def __init__(self, db: Database, settings: Settings, clock: Clock,
                 metrics: Metrics | None = None) -> None:
        self.db = db
        self.settings = settings
        self.clock = clock
        self.metrics = metrics

    def cutoff(self, rule: Rule, now: datetime) -> datetime | None:
        days = float(getattr(self.settings, rule.setting))
        return None if days <= 0 else now - timedelta(days=days)

    async def prune(self, *, dry_run: bool = False) -> dict[str, int] | None:
        """Rows per rule (deleted, or that would be with ``dry_run``); ``None`` when another
        replica is pruning right now. A disabled rule reports 0."""
        now = self.clock.now()
        batch = max(1, self.settings.prune_batch)
        result: dict[str, int] = {}
        for rule in RULES:
            cutoff = self.cutoff(rule, now)
            if cutoff is None:
                result[rule.name] = 0
                continue
            if dry_run:
                async with self.db.connection() as conn:
                    result[rule.name] = int(await conn.fetchval(rule.count_sql(), cutoff))
                continue
            total = 0
            while True:
                async with self.db.transaction(notify=False) as conn:
                    if not await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)",
                                               PRUNE_LOCK):
                        return None
                    status = await conn.execute(rule.delete_sql(), cutoff, batch)
                deleted = int(status.split()[-1])
                total += deleted
                if deleted < batch:
                    break
            result[rule.name] = total
            if self.metrics is not None and total:
                self.metrics.ops.pruned.labels(rule.name).inc(total)
        return result


class PruneJob(PeriodicJob):
    """``serve``'s background pruner: one round at start, then one per ``prune_interval_s``."""

    name = "pruner"

    def __init__(self, pruner: Pruner, interval_s: float) -> None:
        super().__init__(interval_s, run_at_start=True)
        self.pruner = pruner

    async def run_once(self) -> None:
        result = await self.pruner.prune()
        if result and any(result.values()):
            log.info("pruned", extra={"rows": result})
