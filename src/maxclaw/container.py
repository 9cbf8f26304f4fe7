"""The services of one process, built once from settings and the database."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from maxclaw.auth.service import AuthService
from maxclaw.clock import Clock, SystemClock
from maxclaw.db.database import Database
from maxclaw.jobs import Job
from maxclaw.metrics import Metrics
from maxclaw.secrets.service import SecretService, parse_ttl
from maxclaw.settings import Settings
from maxclaw.timeline.service import TimelineService


@dataclass
class Services:
    settings: Settings
    db: Database
    metrics: Metrics
    clock: Clock
    auth: AuthService
    timeline: TimelineService
    secrets: SecretService
    # capabilities attach themselves in maxclaw.wiring.register_capabilities
    components: Any = None
    decisions: Any = None
    presence: Any = None
    push: Any = None
    realtime: Any = None
    turns: Any = None
    tools: Any = None
    agent_messages: Any = None
    jobs: list[Job] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


def build_services(settings: Settings, db: Database, metrics: Metrics,
                   clock: Clock | None = None) -> Services:
    clock = clock or SystemClock()
    secrets = SecretService(db, clock, secret_key=settings.secret_key,
                            key_file=settings.secret_key_file, data_dir=settings.data_dir,
                            ttl=parse_ttl(settings.secret_ttl))
    return Services(settings=settings, db=db, metrics=metrics, clock=clock,
                    auth=AuthService(db), timeline=TimelineService(db), secrets=secrets)
