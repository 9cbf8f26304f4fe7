"""The database gauges of ``/metrics``: what the whole database is waiting on.

Read in one statement when ``/metrics`` is scraped, at most once per ``metrics_db_refresh_s``
(many Prometheus servers scraping many replicas cost one read per interval each). Every read
is served by an index: the due-card index, the outbox's ready and finished indexes, the
turns' queued and finished indexes. A failed read leaves the previous figures and the
``maxclaw_db_gauges_refreshed_timestamp_seconds`` gauge tells how old they are.
"""

from __future__ import annotations

import logging
import time

import asyncpg

from maxclaw.clock import Clock
from maxclaw.db.database import CONNECTION_ERRORS, Database
from maxclaw.errors import Unavailable
from maxclaw.metrics import Metrics

log = logging.getLogger("maxclaw.ops.gauges")

READ = """
SELECT
  (SELECT extract(epoch FROM $1 - min(due_at)) FROM message_components
    WHERE status = 'open' AND due_at IS NOT NULL AND due_at <= $1) AS sweep_lag,
  (SELECT count(*) FROM push_outbox WHERE status = 'pending') AS pending,
  (SELECT count(*) FROM push_outbox WHERE status = 'sending') AS sending,
  (SELECT count(*) FROM push_outbox WHERE status = 'dead') AS dead,
  (SELECT extract(epoch FROM $1 - min(next_attempt_at)) FROM push_outbox
    WHERE status IN ('pending', 'sending') AND next_attempt_at <= $1) AS outbox_oldest,
  (SELECT count(*) FROM turns
    WHERE status = 'lapsed' AND finished_at > $1 - interval '15 minutes') AS lapses,
  (SELECT extract(epoch FROM $1 - min(created_at)) FROM turns
    WHERE status = 'queued') AS queued_oldest
"""


class DatabaseGauges:
    """Refreshes ``metrics.ops``'s database gauges (and this process's pool gauges)."""

    def __init__(self, db: Database, metrics: Metrics, clock: Clock,
                 min_interval_s: float) -> None:
        self.db = db
        self.metrics = metrics
        self.clock = clock
        self.min_interval_s = min_interval_s
        self._last = float("-inf")

    async def refresh(self) -> None:
        ops = self.metrics.ops
        pool = self.db._pool
        if pool is not None:
            ops.pool_size.labels("open").set(pool.get_size())
            ops.pool_size.labels("idle").set(pool.get_idle_size())
            ops.pool_size.labels("max").set(pool.get_max_size())
        if time.monotonic() - self._last < self.min_interval_s:
            return
        self._last = time.monotonic()
        try:
            async with self.db.connection() as conn:
                row = await conn.fetchrow(READ, self.clock.now(), timeout=2.0)
        except (Unavailable, asyncpg.PostgresError, *CONNECTION_ERRORS) as exc:
            log.warning("database gauges not read", extra={"error": type(exc).__name__})
            return
        assert row is not None
        ops.sweep_lag.set(float(row["sweep_lag"] or 0))
        for status in ("pending", "sending", "dead"):
            ops.outbox.labels(status).set(int(row[status]))
        ops.outbox_oldest.set(float(row["outbox_oldest"] or 0))
        ops.turn_lapses.set(int(row["lapses"]))
        ops.turns_queued_oldest.set(float(row["queued_oldest"] or 0))
        ops.gauges_age.set(time.time())
