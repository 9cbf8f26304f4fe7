"""The push outbox's write side, called inside the transaction that creates or settles a
decision, so a notification (or its withdrawal) commits with the state it reports.

Each function writes one ``push_outbox`` row per registered device of the user in one
statement; with no device registered nothing is queued. The dispatcher (``dispatcher.py``)
sends the rows later, from any process.
"""

from __future__ import annotations

from typing import Any

import asyncpg

from maxclaw.push import store
from maxclaw.push.payload import (
    build_payload,
    handed_back_payload,
    main_answered_payload,
    withdraw_payload,
)
from maxclaw.push.rows import NewPush


async def enqueue_notification(conn: asyncpg.Connection, *, user_id: str,
                               decision: dict[str, Any], thread_title: str) -> int:
    """Queue the notification for a new (or reopened) decision; returns rows queued."""
    payload = build_payload(decision, thread_title)
    return await store.enqueue(conn, user_id=user_id, decision_id=int(decision["id"]),
                               kind="notify", collapse_id=payload["collapse_id"],
                               payload=payload)


async def enqueue_notifications(conn: asyncpg.Connection,
                                items: list[tuple[dict[str, Any], str]]) -> int:
    """Queue the notifications of several new decisions (``(decision, thread_title)``) in one
    statement (the due sweep creates carriers by the batch); returns rows queued."""
    rows = []
    for decision, thread_title in items:
        payload = build_payload(decision, thread_title)
        rows.append(NewPush(user_id=str(decision["user_id"]), decision_id=int(decision["id"]),
                            kind="notify", collapse_id=payload["collapse_id"],
                            payload=payload))
    return await store.enqueue_many(conn, rows)


async def enqueue_withdraw(conn: asyncpg.Connection, *, user_id: str,
                           decision: dict[str, Any]) -> int:
    """Queue a ``withdraw`` for a settled decision's ``collapse_id``; returns rows queued."""
    payload = withdraw_payload(decision)
    return await store.withdraw(conn, user_id=user_id, decision_id=int(decision["id"]),
                                collapse_id=payload["collapse_id"], payload=payload)


async def enqueue_main_answered(conn: asyncpg.Connection, *, user_id: str,
                                decision: dict[str, Any], thread_title: str, body: str,
                                reason: str | None) -> int:
    """Tell Max that Main answered for him (Why? / Revoke); queued after the settled
    question's withdraw, so per device the withdraw goes first; returns rows queued."""
    payload = main_answered_payload(decision, thread_title, body, reason)
    return await store.enqueue(conn, user_id=user_id, decision_id=int(decision["id"]),
                               kind="notify", collapse_id=payload["collapse_id"],
                               payload=payload)


async def enqueue_handed_back(conn: asyncpg.Connection, *, user_id: str,
                              decision: dict[str, Any], thread_title: str, body: str,
                              note: str | None) -> int:
    """Notify Max again of a question Main handed back, with Main's note; returns rows
    queued."""
    payload = handed_back_payload(decision, thread_title, body, note)
    return await store.enqueue(conn, user_id=user_id, decision_id=int(decision["id"]),
                               kind="notify", collapse_id=payload["collapse_id"],
                               payload=payload)
