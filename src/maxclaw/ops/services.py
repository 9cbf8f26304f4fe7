"""The operator side of one process: retention and the database gauges (built by ``app.py``
next to the composition root's services, so they stay out of the request path)."""

from __future__ import annotations

from dataclasses import dataclass

from maxclaw.clock import Clock, SystemClock
from maxclaw.db.database import Database
from maxclaw.jobs import Job
from maxclaw.metrics import Metrics
from maxclaw.ops.gauges import DatabaseGauges
from maxclaw.ops.retention import PruneJob, Pruner
from maxclaw.settings import Settings


@dataclass(frozen=True)
class OpsServices:
    pruner: Pruner
    gauges: DatabaseGauges
    jobs: tuple[Job, ...]


def build_ops(settings: Settings, db: Database, metrics: Metrics,
              clock: Clock | None = None) -> OpsServices:
    clock = clock or SystemClock()
    db.on_acquire = metrics.ops.pool_acquire.observe
    pruner = Pruner(db, settings, clock, metrics)
    gauges = DatabaseGauges(db, metrics, clock, settings.metrics_db_refresh_s)
    jobs: tuple[Job, ...] = (
        (PruneJob(pruner, settings.prune_interval_s),) if settings.run_pruner else ())
    return OpsServices(pruner=pruner, gauges=gauges, jobs=jobs)


def database_for(settings: Settings, url: str | None = None, *, min_size: int | None = None,
                 max_size: int | None = None) -> Database:
    """The pool ``settings`` describe (pooler mode, direct LISTEN URL) for ``url``."""
    url = url or settings.database_url
    if not url:
        raise ValueError("no database URL")
    return Database(url, min_size=settings.db_pool_min if min_size is None else min_size,
                    max_size=settings.db_pool_max if max_size is None else max_size,
                    command_timeout=settings.db_command_timeout_s,
                    listen_url=settings.listen_database_url,
                    statement_cache_size=0 if settings.db_pooler == "pgbouncer" else 100)
