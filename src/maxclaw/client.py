"""``maxclaw.client``: the async HTTP client for agent runtimes and user clients.

The implementation lives in ``maxclaw.agent.client``; this module is its public name.
"""

from maxclaw.agent.client import AgentClient, ApiError, UserClient
from maxclaw.agent.models import ChatMessage, Claim, Finished, Posted, Thread

__all__ = ["AgentClient", "ApiError", "ChatMessage", "Claim", "Finished", "Posted", "Thread",
           "UserClient"]
