"""``/mcp``'s backend: the tools on the services, in-process, for one agent principal.

It does what ``maxclaw mcp``'s REST backend (``client/mcp_stdio.py``) does over HTTP, so the two
transports cannot disagree: ``ask`` executes the call id, and when no assistant row carries it
yet writes one (``ask_user_question`` with the MCP arguments, outside any turn) and executes it
— a repeated call id replays its stored result, refusals included; ``get_answers`` is the
thread's inbox outside a turn; ``list_questions`` the thread's cards.
"""

from __future__ import annotations

from typing import Any

from fastapi.encoders import jsonable_encoder

from maxclaw.agentthreads.service import AgentThreadService
from maxclaw.auth.service import Principal
from maxclaw.cards.definitions import ASK_TOOL
from maxclaw.components.server_tools import ToolService
from maxclaw.errors import MaxclawError, NotFound
from maxclaw.turns.messages import AgentMessageService
from maxclaw.wire.mcp import Refused, assistant_row


class ServiceBackend:
    """In-process, for one authenticated agent principal."""

    def __init__(self, who: Principal, tools: ToolService, messages: AgentMessageService,
                 threads: AgentThreadService) -> None:
        self.who = who
        self.tools = tools
        self.messages = messages
        self.threads = threads

    async def ask_schema(self, thread_id: str) -> dict[str, Any] | None:
        try:
            offered = await self.tools.tools(self.who, thread_id)
        except MaxclawError as exc:
            raise Refused(exc.code, exc.message) from None
        for tool in offered:
            if tool["function"]["name"] == ASK_TOOL:
                schema: dict[str, Any] = tool["function"]["parameters"]
                return schema
        return None

    async def ask(self, thread_id: str, call_id: str,
                  arguments: dict[str, Any]) -> tuple[int, Any]:
        try:
            try:
                status, content, _ = await self.tools.execute(self.who, thread_id, call_id)
            except NotFound:  # no row carries the call yet (a missing thread: the post says)
                await self.messages.post(self.who, thread_id, assistant_row(call_id, arguments))
                status, content, _ = await self.tools.execute(self.who, thread_id, call_id)
        except MaxclawError as exc:
            raise Refused(exc.code, exc.message) from None
        return status, content

    async def get_answers(self, thread_id: str) -> dict[str, Any]:
        try:
            result: dict[str, Any] = await self.threads.inbox(self.who, thread_id)
        except MaxclawError as exc:
            raise Refused(exc.code, exc.message) from None
        return result

    async def list_questions(self, thread_id: str) -> dict[str, Any]:
        try:
            # encoded as the REST route encodes it, so both transports answer the same JSON
            result: dict[str, Any] = jsonable_encoder(
                await self.threads.components(self.who, thread_id))
        except MaxclawError as exc:
            raise Refused(exc.code, exc.message) from None
        return result
