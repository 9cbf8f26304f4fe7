"""The client side of the wire: what an agent runtime or a script uses to talk to the service.

``http`` (``AgentClient``, ``UserClient``), ``runtime/`` (the reference runtime, ``maxclaw
agent``, with its workspace tools), ``demo``/``scenario`` (seed 004's level 4) and ``commands``.
Nothing here imports the server: only ``maxclaw.wire`` (the models both sides speak).
"""

from maxclaw.client.http import AgentClient, ApiError, UserClient
from maxclaw.wire.models import ChatMessage, Claim, Finished, Posted, Thread

__all__ = ["AgentClient", "ApiError", "ChatMessage", "Claim", "Finished", "Posted", "Thread",
           "UserClient"]
