"""Attach cards, decisions, presence, the agent's message/tool services and the sweeper."""

from __future__ import annotations

from maxclaw.agent.messages import AgentMessageService
from maxclaw.components.service import ComponentService
from maxclaw.components.sweeper import Sweeper
from maxclaw.components.tools import ToolService
from maxclaw.container import Services
from maxclaw.decisions.service import DecisionService
from maxclaw.presence.service import PresenceService
from maxclaw.secrets.sweeper import SecretSweeper


def register(services: Services) -> None:
    """Build the card services; the sweeper runs inside ``serve`` when enabled."""
    s = services.settings
    services.components = ComponentService(services.db, services.clock, services.metrics,
                                           services.secrets)
    services.decisions = DecisionService(services.db, services.clock, services.components)
    services.presence = PresenceService(services.db, services.clock, s.presence_ttl_s)
    services.tools = ToolService(services.db, services.components, services.timeline)
    services.agent_messages = AgentMessageService(services.db, services.secrets)
    if s.run_sweeper:
        services.jobs.append(Sweeper(services.components, s.sweep_interval_s, s.sweep_batch))
        services.jobs.append(SecretSweeper(services.secrets, s.sweep_interval_s))
