"""Threads and the timeline: the rules around listing, creating and posting user messages."""

from __future__ import annotations

from typing import Any

from maxclaw.auth.service import Principal, parse_uuid
from maxclaw.db.database import Database
from maxclaw.errors import Invalid, NotFound
from maxclaw.timeline import store
from maxclaw.timeline.projections import message_projection, thread_projection
from maxclaw.timeline.rows import ThreadRow

MAX_BODY_CHARS = 100_000


def check_limit(limit: int) -> int:
    if not 1 <= limit <= 500:
        raise Invalid.at(["query", "limit"], "limit must be between 1 and 500")
    return limit


def scoped_thread_id(who: Principal, thread_id: str) -> str:
    """A thread id from a path, checked against the caller's token: a malformed id, or
    another thread than a bound token's, names nothing (404)."""
    thread_id = parse_uuid(thread_id)
    who.check_thread(thread_id)
    return thread_id


class TimelineService:
    """Threads and messages as a user's clients see them."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def list_threads(self, who: Principal, limit: int = 100) -> list[dict[str, Any]]:
        """The caller's threads."""
        async with self.db.connection() as conn:
            rows = await store.list_threads(conn, who.user_id, check_limit(limit))
        return [thread_projection(r) for r in rows]

    async def create_thread(self, who: Principal, title: str, kind: str,
                            category: str | None) -> dict[str, Any]:
        """A new thread; Main is created with its user, never here."""
        if kind not in ("normal", "isolated", "background"):
            raise Invalid.at(["body", "kind"],
                             "kind must be normal, isolated or background (Main exists already)")
        async with self.db.transaction() as conn:
            row = await store.insert_thread(conn, who.user_id, kind, title, category)
        return thread_projection(row)

    async def get_thread(self, who: Principal, thread_id: str) -> ThreadRow:
        """One thread of the caller's, or 404."""
        thread_id = scoped_thread_id(who, thread_id)
        async with self.db.connection() as conn:
            row = await store.get_thread(conn, who.user_id, thread_id)
        if row is None:
            raise NotFound("No such thread.")
        return row

    async def list_messages(self, who: Principal, thread_id: str, after_id: int = 0,
                            limit: int = 100) -> list[dict[str, Any]]:
        """A page of the timeline, as client projections (never a secret body). The page is
        cut at ``limit`` rows or its byte budget (``store.PAGE_BYTES``), whichever comes
        first; ``page_cursor`` says where the next one starts."""
        thread = await self.get_thread(who, thread_id)
        async with self.db.connection() as conn:
            rows = await store.list_messages(conn, who.user_id, thread.id, after_id,
                                             check_limit(limit))
        return [message_projection(r) for r in rows]

    async def list_messages_page(self, who: Principal, thread_id: str, after_id: int = 0,
                                 limit: int = 100) -> dict[str, Any]:
        """``{"messages", "next_after_id"}``: ``next_after_id`` is null on the last page."""
        messages = await self.list_messages(who, thread_id, after_id, limit)
        more = bool(messages) and await self._has_after(who, thread_id, messages[-1]["id"])
        return {"messages": messages, "next_after_id": messages[-1]["id"] if more else None}

    async def _has_after(self, who: Principal, thread_id: str, message_id: int) -> bool:
        async with self.db.connection() as conn:
            return await store.has_message_after(conn, who.user_id, thread_id, message_id)

    async def post_user_message(self, who: Principal, thread_id: str,
                                body: str) -> dict[str, Any]:
        """Max writes in a thread: the row enters the inbox and wakes the thread."""
        if not body.strip():
            raise Invalid.at(["body", "body"], "a message needs some text")
        if len(body) > MAX_BODY_CHARS:
            raise Invalid.at(["body", "body"], f"a message is at most {MAX_BODY_CHARS} characters")
        thread = await self.get_thread(who, thread_id)
        async with self.db.transaction() as conn:
            row = await store.insert_input_and_wake(conn, user_id=who.user_id,
                                                    thread_id=thread.id, role="user", body=body)
        return message_projection(row)
