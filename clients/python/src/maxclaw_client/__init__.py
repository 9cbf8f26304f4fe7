"""maxclaw-client: ask Max without waiting.

    from maxclaw_client import Client
    with Client() as maxclaw:      # MAXCLAW_URL, MAXCLAW_TOKEN, MAXCLAW_THREAD
        maxclaw.ask("Ship 2.0 today?", options=["Ship it", "Wait a week"])
        ...                        # keep working
        for message in maxclaw.answers():
            print(message["content"])
"""

from maxclaw_client._core import Asked
from maxclaw_client.client import AsyncClient, Client
from maxclaw_client.errors import (
    APIError,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    InvalidError,
    MaxClawError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitedError,
    TransportError,
    UnavailableError,
)
from maxclaw_client.tools import (
    anthropic_tools,
    arun_tool,
    langgraph_tools,
    openai_tools,
    run_tool,
)

__version__ = "0.1.0"
__all__ = ["APIError", "Asked", "AsyncClient", "AuthenticationError", "BadRequestError",
           "Client", "ConflictError", "InvalidError", "MaxClawError", "NotFoundError",
           "PermissionDeniedError", "RateLimitedError", "TransportError", "UnavailableError",
           "anthropic_tools", "arun_tool", "langgraph_tools", "openai_tools", "run_tool"]
