"""The operator side of one process: retention and the database gauges (built by the
composition root, ``composition.build_ops``), and the pool ``settings`` describe."""

from __future__ import annotations

from dataclasses import dataclass

from maxclaw.db.database import Database
from maxclaw.jobs import Job
from maxclaw.ops.gauges import DatabaseGauges
from maxclaw.ops.retention import Pruner
from maxclaw.settings import Settings


@dataclass(frozen=True)
class OpsServices:
    """Retention, the database gauges (``/metrics``), and the pruner's job when it runs."""

    pruner: Pruner
    gauges: DatabaseGauges
    jobs: tuple[Job, ...]


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
                    statement_cache_size=0 if settings.db_pooler == "pgbouncer" else 100,
                    hints_after_commit=settings.hints_after_commit)
