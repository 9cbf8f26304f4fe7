"""Threads and the timeline: the rules around listing, creating and posting user messages."""

from __future__ import annotations

from typing import Any

from maxclaw.auth.service import Principal, parse_uuid
from maxclaw.db.database import Database
from maxclaw.errors import Invalid, NotFound
from maxclaw.timeline import store
from maxclaw.timeline.projections import message_projection, thread_projection
from maxclaw.timeline.rows import ThreadRow
from maxclaw.wire.models import Message, MessagePage, Thread, Threads

MAX_BODY_CHARS = 100_000


NEWEST = 2**63 - 1  # ``before_id`` of the newest page: past every message id


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

    async def list_threads(self, who: Principal, limit: int = 100,
                           archived: bool = False) -> Threads:
        """The caller's threads (without the archived ones unless ``archived``)."""
        async with self.db.connection() as conn:
            rows = await store.list_threads(conn, who.user_id, check_limit(limit), archived)
        return Threads(threads=[Thread.model_validate(thread_projection(r)) for r in rows])

    async def create_thread(self, who: Principal, title: str, kind: str,
                            category: str | None) -> Thread:
        """A new thread; Main is created with its user, never here."""
        if kind not in ("normal", "isolated", "background"):
            raise Invalid.at(["body", "kind"],
                             "kind must be normal, isolated or background (Main exists already)")
        async with self.db.transaction() as conn:
            row = await store.insert_thread(conn, who.user_id, kind, title, category)
        return Thread.model_validate(thread_projection(row))

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
        async with self.db.connection(share=who.user_id) as conn:
            rows = await store.list_messages(conn, who.user_id, thread.id, after_id,
                                             check_limit(limit))
        return [message_projection(r) for r in rows]

    async def list_messages_page(self, who: Principal, thread_id: str, after_id: int = 0,
                                 limit: int = 100) -> MessagePage:
        """``{"messages", "next_after_id"}``: ``next_after_id`` is null on the last page."""
        messages = await self.list_messages(who, thread_id, after_id, limit)
        more = bool(messages) and await self._has_after(who, thread_id, messages[-1]["id"])
        return MessagePage.model_validate(
            {"messages": messages, "next_after_id": messages[-1]["id"] if more else None})

    async def list_messages_before(self, who: Principal, thread_id: str,
                                   before_id: int | None, limit: int = 100) -> MessagePage:
        """``{"messages", "prev_before_id", "next_after_id"}``: the page just before
        ``before_id`` (None: the newest page), in id order; ``prev_before_id`` fetches the
        older page (null: this one starts the thread)."""
        thread = await self.get_thread(who, thread_id)
        before = NEWEST if before_id is None else before_id
        async with self.db.connection(share=who.user_id) as conn:
            rows = await store.list_messages_before(conn, who.user_id, thread.id, before,
                                                    check_limit(limit))
            older = bool(rows) and await store.has_message_before(conn, who.user_id,
                                                                  thread.id, rows[0].id)
            newer = bool(rows) and await store.has_message_after(conn, who.user_id,
                                                                 thread.id, rows[-1].id)
        messages = [message_projection(r) for r in rows]
        return MessagePage.model_validate({
            "messages": messages, "prev_before_id": rows[0].id if older else None,
            "next_after_id": rows[-1].id if newer else None})

    async def _has_after(self, who: Principal, thread_id: str, message_id: int) -> bool:
        async with self.db.connection() as conn:
            return await store.has_message_after(conn, who.user_id, thread_id, message_id)

    async def post_user_message(self, who: Principal, thread_id: str,
                                body: str) -> Message:
        """Max writes in a thread: the row enters the inbox and wakes the thread."""
        if not body.strip():
            raise Invalid.at(["body", "body"], "a message needs some text")
        if len(body) > MAX_BODY_CHARS:
            raise Invalid.at(["body", "body"], f"a message is at most {MAX_BODY_CHARS} characters")
        thread = await self.get_thread(who, thread_id)
        async with self.db.transaction() as conn:
            row = await store.insert_input_and_wake(conn, user_id=who.user_id,
                                                    thread_id=thread.id, role="user", body=body)
        return Message.model_validate(message_projection(row))
