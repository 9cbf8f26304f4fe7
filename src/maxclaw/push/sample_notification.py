"""A test notification ("send a test notification" in the WebUI's Notifications view).

It goes through the outbox and the dispatcher like any push, so it proves the whole path to
the device. It belongs to no decision, carries no action token and has its own collapse id,
so a second test replaces the first. An APNs device with a Live Activity is skipped: its
activity update describes a question, and a test is none.
"""

from __future__ import annotations

from typing import Any

import asyncpg

from maxclaw.push.payload import PAYLOAD_VERSION

TEST_COLLAPSE_ID = "maxclaw:test"

ENQUEUE_TEST = """
WITH queued AS (
    INSERT INTO push_outbox (user_id, device_id, decision_id, kind, collapse_id, payload)
    SELECT d.user_id, d.id, NULL, 'notify', $2, $3
    FROM push_devices AS d
    WHERE d.user_id = $1 AND ($4::bigint IS NULL OR d.id = $4)
    RETURNING id
), counted AS (SELECT count(*) AS n FROM queued)
SELECT n, CASE WHEN n > 0 AND current_setting('maxclaw.notify', true) IS DISTINCT FROM 'off'
               THEN pg_notify('maxclaw_push', '') END AS hint
FROM counted
"""  # push.store.ENQUEUE's shape, for one device or all


def _payload() -> dict[str, Any]:
    return {"v": PAYLOAD_VERSION, "kind": "test", "title": "MaxClaw",
            "body": "Test notification: questions from your agents will arrive like this.",
            "collapse_id": TEST_COLLAPSE_ID}


async def enqueue_test(conn: asyncpg.Connection, *, user_id: str,
                       device_id: int | None) -> int:
    """Queue a test for the user's devices (or one of them); returns rows queued."""
    row = await conn.fetchrow(ENQUEUE_TEST, user_id, TEST_COLLAPSE_ID, _payload(),
                              device_id)
    return int(row["n"]) if row else 0
