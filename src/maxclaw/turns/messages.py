"""``POST /v1/agent/threads/{id}/messages``: what an agent runtime writes into a thread.

Assistant and tool rows carry the runtime's ``turn_id`` as a fencing token: a write from a turn
that is no longer the thread's running turn (its lease lapsed and the work was re-claimed, or it
finished) is refused with 409, so a runtime that froze and woke up cannot write into someone
else's turn. Event rows (e.g. a background job finished) enter the inbox and wake the thread.
"""

from __future__ import annotations

from typing import Any

import asyncpg

from maxclaw.auth.service import Principal, parse_uuid
from maxclaw.cards.definitions import normalize_tool_call
from maxclaw.db.database import Database
from maxclaw.errors import Conflict, Invalid, NotFound
from maxclaw.jsonlimits import check_depth
from maxclaw.secrets.service import SecretService
from maxclaw.timeline import store as timeline_store
from maxclaw.turns import store as turn_store
from maxclaw.turns.guard import looks_forged

MAX_TEXT = 200_000


def _text(value: Any, field: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise Invalid.at(["body", field], f"{field} must be a string")
    if len(value) > MAX_TEXT:
        raise Invalid.at(["body", field], f"{field} is at most {MAX_TEXT:,} characters")
    return value


class AgentMessageService:
    """Assistant, tool and event rows from agent runtimes."""

    def __init__(self, db: Database, secrets: SecretService) -> None:
        self.db = db
        self.secrets = secrets

    async def _insert(self, conn: asyncpg.Connection, who: Principal, thread_id: str,
                      **fields: Any) -> dict[str, Any]:
        """Insert a runtime's row after the echo check: a row that holds one of the thread's
        live secrets is stored masked and sensitive, its original sealed next to it."""
        guarded = await self.secrets.guard(conn, who.user_id, thread_id,
                                           body=fields.get("body"), content=fields.get("content"),
                                           tool_calls=fields.get("tool_calls"))
        if guarded.sealed is None:
            return await timeline_store.insert_message(conn, user_id=who.user_id,
                                                       thread_id=thread_id, **fields)
        meta = dict(fields.get("source_meta") or {})
        meta["secretEcho"] = {"components": list(guarded.components)}
        fields.update(body=guarded.body, content=guarded.content,
                      tool_calls=guarded.tool_calls, source_meta=meta, sensitive=True)
        row = await timeline_store.insert_message(conn, user_id=who.user_id,
                                                  thread_id=thread_id, **fields)
        await self.secrets.store_sealed(conn, who.user_id, thread_id, row["id"], guarded.sealed)
        return row

    async def post(self, who: Principal, thread_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """Append the runtime's row; returns ``{"id", "guard"}``."""
        thread_id = parse_uuid(thread_id)
        who.check_thread(thread_id)
        check_depth(body, ["body"])
        role = body.get("role")
        turn_id = body.get("turn_id")
        if turn_id is not None and (isinstance(turn_id, bool) or not isinstance(turn_id, int)):
            raise Invalid.at(["body", "turn_id"], "turn_id must be an integer or null")
        async with self.db.transaction() as conn:
            if await timeline_store.get_thread(conn, who.user_id, thread_id) is None:
                raise NotFound("No such thread.")
            if turn_id is not None and role in ("assistant", "tool"):
                await self._check_turn(conn, who.user_id, thread_id, turn_id)
            if role == "assistant":
                return await self._assistant(conn, who, thread_id, body, turn_id)
            if role == "tool":
                return await self._tool(conn, who, thread_id, body, turn_id)
            if role == "event":
                return await self._event(conn, who, thread_id, body)
        raise Invalid.at(["body", "role"], "role must be assistant, tool or event")

    async def _check_turn(self, conn: asyncpg.Connection, user_id: str, thread_id: str,
                          turn_id: int) -> None:
        # current_running_turn locks the turn row FOR SHARE until this write commits, so the
        # lease cannot lapse (and the work be re-claimed) between this check and the commit
        if await turn_store.current_running_turn(conn, user_id, thread_id) != turn_id:
            raise Conflict(f"Turn {turn_id} is not this thread's running turn (its lease lapsed "
                           "or it finished); claim a new turn before writing.")

    async def _assistant(self, conn: asyncpg.Connection, who: Principal, thread_id: str,
                         body: dict[str, Any], turn_id: int | None) -> dict[str, Any]:
        content = _text(body.get("content"), "content")
        raw_calls = body.get("tool_calls") or []
        if not isinstance(raw_calls, list) or len(raw_calls) > 64:
            raise Invalid.at(["body", "tool_calls"], "tool_calls must be a list (at most 64)")
        calls = [normalize_tool_call(c) for c in raw_calls]
        if len({c["id"] for c in calls}) != len(calls):
            raise Invalid.at(["body", "tool_calls"], "tool call ids must be unique")
        guard = "forged" if looks_forged(content) else None
        row = await self._insert(
            conn, who, thread_id, role="assistant", body=content,
            tool_calls=calls or None, source_meta={"guard": guard} if guard else None,
            turn_id=turn_id)
        return {"id": row["id"], "guard": guard}

    async def _tool(self, conn: asyncpg.Connection, who: Principal, thread_id: str,
                    body: dict[str, Any], turn_id: int | None) -> dict[str, Any]:
        call_id = body.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            raise Invalid.at(["body", "tool_call_id"], "tool_call_id is required")
        try:
            async with conn.transaction():  # a savepoint: the duplicate must not poison the rest
                row = await self._insert(
                    conn, who, thread_id, role="tool",
                    tool_call_id=call_id, content=body.get("content"), turn_id=turn_id)
        except asyncpg.UniqueViolationError:
            raise Conflict(f"Tool call {call_id!r} already has a result.") from None
        return {"id": row["id"], "guard": None}

    async def _event(self, conn: asyncpg.Connection, who: Principal, thread_id: str,
                     body: dict[str, Any]) -> dict[str, Any]:
        text = _text(body.get("body"), "body")
        if not text:
            raise Invalid.at(["body", "body"], "an event needs a body")
        meta = body.get("source_meta")
        if meta is not None and not isinstance(meta, dict):
            raise Invalid.at(["body", "source_meta"], "source_meta must be an object")
        # the service's own notice kinds cannot be claimed by a runtime
        if meta and ({"componentAnswer", "askHandoff"} & meta.keys()):
            raise Invalid.at(["body", "source_meta"],
                             "componentAnswer and askHandoff are written by the service only")
        row = await self._insert(conn, who, thread_id, role="event", body=text,
                                 source_meta=meta)
        await timeline_store.wake_thread(conn, who.user_id, thread_id)
        return {"id": row["id"], "guard": None}
