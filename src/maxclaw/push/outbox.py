"""The push outbox's write side, called inside the transaction that creates or settles a
decision, so a notification (or its withdrawal) commits with the state it reports.

(The push issue fills these in: one row per registered device, payload per ``api.md``.)
"""

from __future__ import annotations

from typing import Any

import asyncpg


async def enqueue_notification(conn: asyncpg.Connection, *, user_id: str,
                               decision: dict[str, Any], thread_title: str) -> int:
    """Queue the notification for a new (or reopened) decision; returns rows queued."""
    return 0


async def enqueue_withdraw(conn: asyncpg.Connection, *, user_id: str,
                           decision: dict[str, Any]) -> int:
    """Queue a ``withdraw`` for a settled decision's ``collapse_id``; returns rows queued."""
    return 0
