"""The composition root: every service of one process, built once, in dependency order.

This is the only module that knows how the parts fit together. Each service receives what it
needs as constructor arguments (no locator, no optional placeholders), and the result is a
frozen ``Services`` whose fields mypy can see through: a route that reads ``services.push``
gets a ``PushService``. Background jobs (sweeper, dispatcher, realtime hub, lapse tick,
pruner, …) are listed in start order; ``app.py`` starts them after the pool opens and stops
them in reverse, the shared LISTEN connection last.

    settings, db, metrics, clock
      └─ listener (the process's one LISTEN connection), ops (pruner, database gauges)
           └─ auth (+ token revocations), timeline, secrets (sealed answers), presence
                └─ components ─ decisions ─ push (adapters, action tokens, dispatcher)
                     └─ surfaces: the panel and push actions, settling cards from outside
                     └─ server tools, agent messages, turns, realtime hub, web assets
                          └─ agent threads (inbox outside a turn), /mcp
"""

from __future__ import annotations

from dataclasses import dataclass

from maxclaw.agentthreads.service import AgentThreadService
from maxclaw.auth.revocations import RevocationListener
from maxclaw.auth.service import AuthService
from maxclaw.clock import Clock, SystemClock
from maxclaw.components.main_tools import MainContext, MainLimits
from maxclaw.components.server_tools import ToolService
from maxclaw.components.service import ComponentService
from maxclaw.components.sweeper import Sweeper
from maxclaw.db.database import Database
from maxclaw.db.listen import Listener
from maxclaw.housekeeping.threads import ThreadHousekeeping
from maxclaw.housekeeping.users import UserHousekeeping
from maxclaw.jobs import Job
from maxclaw.leases.service import RuntimeLeaseService
from maxclaw.mcp.streamable import McpHttpApp
from maxclaw.metrics import Metrics
from maxclaw.ops.gauges import DatabaseGauges
from maxclaw.ops.metrics_http import MetricsServer
from maxclaw.ops.retention import PruneJob, Pruner
from maxclaw.ops.services import OpsServices
from maxclaw.presence.service import PresenceService
from maxclaw.push.action_tokens import ActionTokens, stamp_adapters
from maxclaw.push.adapters.base import Adapter
from maxclaw.push.dispatcher import Dispatcher
from maxclaw.push.service import CloseAdapters, build_adapters
from maxclaw.quotas import Quotas
from maxclaw.realtime import logfilter
from maxclaw.realtime.hub import RealtimeHub
from maxclaw.search.service import SearchService
from maxclaw.secrets.service import SecretService, parse_ttl
from maxclaw.secrets.sweeper import SecretSweeper
from maxclaw.settings import Settings
from maxclaw.surfaces.panel import DecisionPanel
from maxclaw.surfaces.push_actions import PushActions
from maxclaw.surfaces.settings import PrefsService
from maxclaw.timeline.service import TimelineService
from maxclaw.turns.lapse import LapseJob
from maxclaw.turns.listener import TurnListener
from maxclaw.turns.messages import AgentMessageService
from maxclaw.turns.service import TurnService
from maxclaw.web.apidocs import DocsAssets
from maxclaw.web.assets import WebAssets


@dataclass(frozen=True)
class Services:
    """The process's services; built by ``build_services`` and never reassigned."""

    settings: Settings
    db: Database
    metrics: Metrics
    clock: Clock
    listener: Listener  # the one LISTEN connection (revocations, turns, realtime, push)
    ops: OpsServices
    auth: AuthService
    timeline: TimelineService
    secrets: SecretService
    presence: PresenceService
    components: ComponentService
    prefs: PrefsService  # /v1/settings (locale, time zone, quiet hours)
    decisions: DecisionPanel
    push: PushActions
    tools: ToolService
    agent_messages: AgentMessageService
    leases: RuntimeLeaseService  # runtime leases: background jobs end when their runtime dies
    turns: TurnService
    agent_threads: AgentThreadService
    mcp_http: McpHttpApp
    realtime: RealtimeHub
    web_assets: WebAssets
    docs_assets: DocsAssets  # /docs: Swagger UI from the package (no CDN)
    jobs: tuple[Job, ...]
    quotas: Quotas
    thread_housekeeping: ThreadHousekeeping  # rename, archive, delete (issue 30)
    users: UserHousekeeping  # maxclaw user list / delete, GET /v1/me's counts
    search: SearchService


def build_services(settings: Settings, db: Database, metrics: Metrics,
                   clock: Clock | None = None, *,
                   push_adapters: dict[str, Adapter] | None = None) -> Services:
    """Build every service; ``settings.run_*`` decide which background jobs are listed."""
    if settings.database_url is None:
        raise ValueError("build_services needs settings.database_url")
    clock = clock or SystemClock()
    listener = Listener(db.listen_url)
    ops = build_ops(settings, db, metrics, clock)
    auth = AuthService(db, RevocationListener(listener))
    timeline = TimelineService(db)
    presence = PresenceService(db, clock, settings.presence_ttl_s)
    # the keyring loads on first use: commands that never touch a secret need no key
    secrets = SecretService(db, clock, secret_key=settings.secret_key,
                            key_file=settings.secret_key_file, data_dir=settings.data_dir,
                            ttl=parse_ttl(settings.secret_ttl))
    components = ComponentService(db, clock, metrics, secrets,
                                  retract_window_minutes=settings.retract_window_minutes,
                                  main_timeout_minutes=settings.main_timeout_minutes)
    prefs = PrefsService(db, clock, settings.main_timeout_minutes)
    decisions = DecisionPanel(db, clock, components)
    quotas = Quotas(settings)
    push = build_push(settings, db, metrics, clock, decisions, quotas, listener,
                      push_adapters)
    tools = ToolService(db, components, timeline, MainContext(clock, MainLimits(
        rows=settings.main_read_rows, bytes=settings.main_read_bytes)))
    leases = RuntimeLeaseService(db, clock, secrets, lease_s=settings.runtime_lease_s)
    agent_messages = AgentMessageService(db, secrets, leases, tools)
    turn_listener = TurnListener(listener)
    turns = TurnService(db, clock, turn_listener, secrets, lease_s=settings.turn_lease_s,
                        window_rows=settings.model_window_rows,
                        window_bytes=settings.model_window_bytes)
    agent_threads = AgentThreadService(db, clock, timeline, secrets)
    mcp_http = McpHttpApp(auth, tools, agent_messages, agent_threads, quotas,
                          preload=settings.mcp_preload)
    realtime = RealtimeHub(db, poll_s=settings.realtime_poll_s, registry=metrics.registry,
                           batch_bytes=settings.realtime_batch_bytes, listener=listener)
    search = SearchService(db)
    logfilter.install()

    # stopped in reverse: the LISTEN connection outlives every subscriber
    jobs: list[Job] = [listener, search]  # search: reads which indexes it has, once
    if settings.run_sweeper:
        jobs.append(Sweeper(components, settings.sweep_interval_s, settings.sweep_batch,
                            presence))
        jobs.append(SecretSweeper(secrets, settings.sweep_interval_s))  # MAXCLAW_SECRET_TTL
    # with the dispatcher off (tests, API-only replicas) the adapters' connections are still
    # released at shutdown, in case something drove the dispatcher by hand
    jobs.append(push.dispatcher if settings.run_push_dispatcher else CloseAdapters(push))
    if settings.run_listener:
        jobs.append(realtime)
    jobs.append(turn_listener)  # wakes the claims still waiting at shutdown
    # the lapse tick is a background job like the sweeper: tests drive lapse_expired by hand
    if settings.run_sweeper:
        jobs.append(LapseJob(turns, leases, settings.lapse_interval_s))
    jobs.extend(ops.jobs)
    jobs.append(mcp_http)  # /mcp: the MCP SDK's session manager
    return Services(settings=settings, db=db, metrics=metrics, clock=clock, listener=listener,
                    ops=ops, auth=auth, timeline=timeline, secrets=secrets, presence=presence,
                    components=components, prefs=prefs, decisions=decisions, push=push, tools=tools,
                    agent_messages=agent_messages, leases=leases, turns=turns,
                    agent_threads=agent_threads,
                    mcp_http=mcp_http, realtime=realtime, web_assets=WebAssets.from_package(),
                    docs_assets=DocsAssets.from_packages(),
                    jobs=tuple(jobs), quotas=quotas,
                    thread_housekeeping=ThreadHousekeeping(db, components),
                    users=UserHousekeeping(db), search=search)


def build_ops(settings: Settings, db: Database, metrics: Metrics, clock: Clock) -> OpsServices:
    """The operator side: retention (and its job when ``run_pruner``), the database gauges."""
    db.on_acquire = metrics.ops.pool_acquire.observe
    pruner = Pruner(db, settings, clock, metrics)
    gauges = DatabaseGauges(db, metrics, clock, settings.metrics_db_refresh_s)
    jobs: tuple[Job, ...] = (
        (PruneJob(pruner, settings.prune_interval_s),) if settings.run_pruner else ())
    if settings.metrics_port is not None:  # /metrics on its own port (ops/metrics_http.py)
        jobs = (*jobs, MetricsServer(settings, metrics, gauges))
    return OpsServices(pruner=pruner, gauges=gauges, jobs=jobs)


def build_push(settings: Settings, db: Database, metrics: Metrics, clock: Clock,
               panel: DecisionPanel, quotas: Quotas, listener: Listener,
               adapters: dict[str, Adapter] | None) -> PushActions:
    """Push: the adapters (notifications carry a per-device action token, minted as they are
    sent), the action tokens their buttons are checked against, and the dispatcher."""
    stamped = stamp_adapters(adapters if adapters is not None else build_adapters(settings),
                             db, clock)
    dispatcher = Dispatcher(db, stamped, settings=settings, metrics=metrics, clock=clock,
                            quotas=quotas, listener=listener)
    return PushActions(db, settings, panel, adapters=stamped,
                       action_tokens=ActionTokens(db, clock), dispatcher=dispatcher)
