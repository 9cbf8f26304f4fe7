"""The composition root: every service of one process, built once, in dependency order.

This is the only module that knows how the parts fit together. Each service receives what it
needs as constructor arguments (no locator, no optional placeholders), and the result is a
frozen ``Services`` whose fields mypy can see through: a route that reads ``services.push``
gets a ``PushService``. Background jobs (sweeper, dispatcher, realtime listener, lapse tick,
…) are listed in start order; ``app.py`` starts them after the pool opens and stops them in
reverse.

    settings, db, metrics, clock
      └─ auth, timeline, secrets (sealed answers), presence
           └─ components ─ decisions ─ push (decisions settle push actions)
                └─ server tools, agent messages, turns, realtime hub, web assets
                     └─ agent threads (inbox outside a turn), /mcp
"""

from __future__ import annotations

from dataclasses import dataclass

from maxclaw.agentthreads.service import AgentThreadService
from maxclaw.auth.service import AuthService
from maxclaw.clock import Clock, SystemClock
from maxclaw.components.server_tools import ToolService
from maxclaw.components.service import ComponentService
from maxclaw.components.sweeper import Sweeper
from maxclaw.db.database import Database
from maxclaw.decisions.service import DecisionService
from maxclaw.jobs import Job
from maxclaw.mcp.streamable import McpHttpApp
from maxclaw.metrics import Metrics
from maxclaw.presence.service import PresenceService
from maxclaw.push.adapters.base import Adapter
from maxclaw.push.service import CloseAdapters, PushService
from maxclaw.quotas import Quotas
from maxclaw.realtime import logfilter
from maxclaw.realtime.hub import RealtimeHub
from maxclaw.secrets.service import SecretService, parse_ttl
from maxclaw.secrets.sweeper import SecretSweeper
from maxclaw.settings import Settings
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
    auth: AuthService
    timeline: TimelineService
    secrets: SecretService
    presence: PresenceService
    components: ComponentService
    decisions: DecisionService
    push: PushService
    tools: ToolService
    agent_messages: AgentMessageService
    turns: TurnService
    agent_threads: AgentThreadService
    mcp_http: McpHttpApp
    realtime: RealtimeHub
    web_assets: WebAssets
    docs_assets: DocsAssets  # /docs: Swagger UI from the package (no CDN)
    jobs: tuple[Job, ...]
    quotas: Quotas


def build_services(settings: Settings, db: Database, metrics: Metrics,
                   clock: Clock | None = None, *,
                   push_adapters: dict[str, Adapter] | None = None) -> Services:
    """Build every service; ``settings.run_*`` decide which background jobs are listed."""
    if settings.database_url is None:
        raise ValueError("build_services needs settings.database_url")
    clock = clock or SystemClock()
    auth = AuthService(db)
    timeline = TimelineService(db)
    presence = PresenceService(db, clock, settings.presence_ttl_s)
    # the keyring loads on first use: commands that never touch a secret need no key
    secrets = SecretService(db, clock, secret_key=settings.secret_key,
                            key_file=settings.secret_key_file, data_dir=settings.data_dir,
                            ttl=parse_ttl(settings.secret_ttl))
    components = ComponentService(db, clock, metrics, secrets)
    decisions = DecisionService(db, clock, components)
    quotas = Quotas(settings)
    push = PushService(db, settings, metrics, clock, decisions, adapters=push_adapters,
                       quotas=quotas)
    tools = ToolService(db, components, timeline)
    agent_messages = AgentMessageService(db, secrets, tools)
    listener = TurnListener(db.listen_url)
    turns = TurnService(db, clock, listener, secrets, lease_s=settings.turn_lease_s,
                        window_rows=settings.model_window_rows,
                        window_bytes=settings.model_window_bytes)
    agent_threads = AgentThreadService(db, clock, timeline, secrets)
    mcp_http = McpHttpApp(auth, tools, agent_messages, agent_threads)
    realtime = RealtimeHub(db, poll_s=settings.realtime_poll_s, registry=metrics.registry,
                           batch_bytes=settings.realtime_batch_bytes)
    logfilter.install()

    jobs: list[Job] = []
    if settings.run_sweeper:
        jobs.append(Sweeper(components, settings.sweep_interval_s, settings.sweep_batch,
                            presence))
        jobs.append(SecretSweeper(secrets, settings.sweep_interval_s))  # MAXCLAW_SECRET_TTL
    # with the dispatcher off (tests, API-only replicas) the adapters' connections are still
    # released at shutdown, in case something drove the dispatcher by hand
    jobs.append(push.dispatcher if settings.run_push_dispatcher else CloseAdapters(push))
    if settings.run_listener:
        jobs.append(realtime)
    jobs.append(listener)  # closes the LISTEN connection at shutdown
    jobs.append(auth.revocations)  # likewise for token revocations
    # the lapse tick is a background job like the sweeper: tests drive lapse_expired by hand
    if settings.run_sweeper:
        jobs.append(LapseJob(turns))
    jobs.append(mcp_http)  # /mcp: the MCP SDK's session manager
    return Services(settings=settings, db=db, metrics=metrics, clock=clock, auth=auth,
                    timeline=timeline, secrets=secrets, presence=presence, components=components,
                    decisions=decisions, push=push, tools=tools, agent_messages=agent_messages,
                    turns=turns, agent_threads=agent_threads, mcp_http=mcp_http,
                    realtime=realtime, web_assets=WebAssets.from_package(),
                    docs_assets=DocsAssets.from_packages(),
                    jobs=tuple(jobs), quotas=quotas)
