"""``/mcp``'s backend: the tools on the services, in-process, for one agent principal.

It does what ``maxclaw mcp``'s REST backend (``client/mcp_stdio.py``) does over HTTP, so the two
transports cannot disagree: ``run`` posts the call as an assistant row with ``"execute": true``
(``ask_user_question`` or ``withdraw_question`` with the MCP arguments, outside any turn: one
transaction) — a repeated call id replays its stored result, refusals included;
``get_answers`` is the thread's inbox outside a turn; ``list_questions`` the thread's cards.
"""

from __future__ import annotations

from typing import Any

from fastapi.encoders import jsonable_encoder

from maxclaw.agentthreads.service import AgentThreadService
from maxclaw.auth.service import Principal
from maxclaw.components.server_tools import ToolService
from maxclaw.errors import MaxclawError
from maxclaw.turns.messages import AgentMessageService
from maxclaw.wire.mcp import Refused, assistant_row, offered_thread_tools


class ServiceBackend:
    """In-process, for one authenticated agent principal."""

    def __init__(self, who: Principal, tools: ToolService, messages: AgentMessageService,
                 threads: AgentThreadService) -> None:
        self.who = who
        self.tools = tools
        self.messages = messages
        self.threads = threads

    async def thread_tools(self, thread_id: str) -> dict[str, tuple[str, dict[str, Any]]]:
        try:
            offered = await self.tools.tools(self.who, thread_id)
        except MaxclawError as exc:
            raise Refused(exc.code, exc.message) from None
        return offered_thread_tools(offered)

    async def run(self, thread_id: str, call_id: str, name: str,
                  arguments: dict[str, Any]) -> tuple[int, Any]:
        """The call's assistant row posted with ``"execute": true``: one transaction (a call
        id sent again replays its stored result)."""
        try:
            posted = await self.messages.post(
                self.who, thread_id, {**assistant_row(call_id, arguments, name), "execute": True})
        except MaxclawError as exc:
            raise Refused(exc.code, exc.message) from None
        for result in posted.get("results") or []:
            if result["tool_call_id"] == call_id:
                return int(result["status"]), result["content"]
        raise Refused("unavailable", "The call was posted without a result; try again.")

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
