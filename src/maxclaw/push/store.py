"""SQL for push: devices, and the outbox's write side (enqueue) and work side (claim, settle).

The outbox is a queue in PostgreSQL. Rows are written inside the transaction that creates or
settles a decision, and dispatchers claim them with ``FOR UPDATE SKIP LOCKED`` plus a lease:
a claimed row is ``sending`` until ``lease_until``; a dispatcher that dies mid-send leaves the
lease to lapse, and any dispatcher may claim the row again. Every write that follows a send is
fenced by the attempt number it claimed, so a dispatcher that lost its lease changes nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import asyncpg

from maxclaw.db.database import record_dict

# -- enqueue: one row per registered device of the user, in one statement --------------------
# The tail of every enqueue: count the rows a ``queued`` CTE inserted and, when there are any,
# send the hint that wakes LISTENing dispatchers. It is skipped when nothing was queued or when
# the caller switched notifications off for its transaction (polling still finds the rows).
COUNT_AND_HINT = """, counted AS (SELECT count(*) AS n FROM queued)
SELECT n, CASE WHEN n > 0 AND current_setting('maxclaw.notify', true) IS DISTINCT FROM 'off'
               THEN pg_notify('maxclaw_push', '') END AS hint
FROM counted
"""

ENQUEUE = """
WITH queued AS (
    INSERT INTO push_outbox (user_id, device_id, decision_id, kind, collapse_id, payload)
    SELECT d.user_id, d.id, $2, $3, $4, $5
    FROM push_devices AS d
    WHERE d.user_id = $1
    RETURNING id
)""" + COUNT_AND_HINT

# -- claim: due rows, fairly between users, never two rows of one (decision, device) at once --
# A 'sending' row's next_attempt_at is its lease end, so one partial index serves both fresh
# rows and rows whose lease lapsed. The NOT EXISTS keeps each (decision, device) in id order:
# a withdraw never overtakes the notification it withdraws, and a reopened decision's new
# notification never overtakes the withdraw. Fairness: of the oldest ``$4`` ready rows, each
# user's first row comes before anyone's second (``turn``), so one user's thousand devices
# take one slot of a claim, not all of them, and another user's single push is not queued
# behind them.
CLAIM_DUE = """
WITH ready AS (
    SELECT o.id, o.user_id, o.next_attempt_at
    FROM push_outbox AS o
    WHERE o.status IN ('pending', 'sending') AND o.next_attempt_at <= $1
      AND NOT EXISTS (
          SELECT 1 FROM push_outbox AS e
          WHERE e.decision_id = o.decision_id AND e.device_id = o.device_id AND e.id < o.id
            AND e.status IN ('pending', 'sending'))
    ORDER BY o.next_attempt_at
    LIMIT $4
), ranked AS (
    SELECT r.id, r.next_attempt_at,
           row_number() OVER (PARTITION BY r.user_id ORDER BY r.next_attempt_at, r.id) AS turn
    FROM ready AS r
), due AS (
    -- the lock sits under the LIMIT: rows another dispatcher holds do not use up the claim
    SELECT o.id
    FROM push_outbox AS o JOIN ranked AS r ON r.id = o.id
    WHERE o.status IN ('pending', 'sending') AND o.next_attempt_at <= $1
    ORDER BY r.turn, r.next_attempt_at, r.id
    LIMIT $2
    FOR UPDATE OF o SKIP LOCKED
)
UPDATE push_outbox AS o
SET status = 'sending', attempts = o.attempts + 1,
    lease_until = $1 + make_interval(secs => $3),
    next_attempt_at = $1 + make_interval(secs => $3)
FROM due, push_devices AS d
WHERE o.id = due.id AND d.id = o.device_id
RETURNING o.id, o.user_id, o.device_id, o.decision_id, o.kind, o.collapse_id, o.payload,
          o.attempts, o.lease_until, d.platform, d.config, d.secret
"""

# the heartbeat: a live dispatcher extends the lease of every row it still holds (fenced by
# the attempt it claimed), so a slow endpoint keeps its row instead of being raced by another
# dispatcher once a short lease runs out
EXTEND_LEASES = """
UPDATE push_outbox AS o
SET lease_until = $3::timestamptz + make_interval(secs => $4),
    next_attempt_at = $3::timestamptz + make_interval(secs => $4)
FROM unnest($1::bigint[], $2::int[]) AS s(id, attempt)
WHERE o.id = s.id AND o.status = 'sending' AND o.attempts = s.attempt
RETURNING o.id
"""

MARK_SENT = """
UPDATE push_outbox SET status = 'sent', sent_at = $3, lease_until = NULL
WHERE id = $1 AND status = 'sending' AND attempts = $2
"""

# the deliveries that completed since the last acknowledgement, in one statement (a group
# commit: one commit for whatever finished while the previous one was being written)
MARK_SENT_MANY = """
UPDATE push_outbox AS o SET status = 'sent', sent_at = $3, lease_until = NULL
FROM unnest($1::bigint[], $2::int[]) AS s(id, attempt)
WHERE o.id = s.id AND o.status = 'sending' AND o.attempts = s.attempt
RETURNING o.id
"""

SCHEDULE_RETRY = """
UPDATE push_outbox
SET status = 'pending', next_attempt_at = $3, lease_until = NULL, last_error = $4
WHERE id = $1 AND status = 'sending' AND attempts = $2
"""

DEFER = """
UPDATE push_outbox
SET status = 'pending', attempts = attempts - 1, next_attempt_at = $3, lease_until = NULL
WHERE id = $1 AND status = 'sending' AND attempts = $2
"""

MARK_DEAD = """
UPDATE push_outbox SET status = 'dead', lease_until = NULL, last_error = $3
WHERE id = $1 AND status = 'sending' AND attempts = $2
"""

# -- devices -----------------------------------------------------------------------------
# Re-registering the same address (a browser re-subscribing, an app relaunch) updates the
# existing row instead of adding a second one that would receive every push twice.
UPDATE_DEVICE = """
UPDATE push_devices SET config = $4, secret = $5
WHERE user_id = $1 AND platform = $2 AND config->>'address' = $3
RETURNING id, platform, config, created_at
"""

INSERT_DEVICE = """
INSERT INTO push_devices (user_id, platform, config, secret) VALUES ($1, $2, $3, $4)
RETURNING id, platform, config, created_at
"""

LOCK_USER_DEVICES = "SELECT pg_advisory_xact_lock(hashtext('maxclaw_push_devices:' || $1::text))"

COUNT_DEVICES = "SELECT count(*) FROM push_devices WHERE user_id = $1"

DELETE_DEVICE = "DELETE FROM push_devices WHERE id = $1 AND user_id = $2"

LIST_DEVICES = """
SELECT id, platform, config, created_at FROM push_devices WHERE user_id = $1 ORDER BY id
"""


# Many decisions' notifications at once (the due sweep's carriers): one row per (item, device).
ENQUEUE_MANY = """
WITH queued AS (
    INSERT INTO push_outbox (user_id, device_id, decision_id, kind, collapse_id, payload)
    SELECT d.user_id, d.id, x.decision_id, x.kind, x.collapse_id, x.payload
    FROM unnest($1::uuid[], $2::bigint[], $3::text[], $4::text[], $5::jsonb[])
         AS x(user_id, decision_id, kind, collapse_id, payload)
    JOIN push_devices AS d ON d.user_id = x.user_id
    RETURNING id
)""" + COUNT_AND_HINT


async def enqueue_many(conn: asyncpg.Connection, items: list[dict[str, Any]]) -> int:
    """Queue several payloads (``user_id, decision_id, kind, collapse_id, payload``) for every
    device of their users in one statement; returns the number of rows queued."""
    if not items:
        return 0
    cols = ("user_id", "decision_id", "kind", "collapse_id", "payload")
    row = await conn.fetchrow(ENQUEUE_MANY, *[[i[c] for i in items] for c in cols])
    return int(row["n"]) if row else 0


async def enqueue(conn: asyncpg.Connection, *, user_id: str, decision_id: int | None,
                  kind: str, collapse_id: str | None, payload: dict[str, Any]) -> int:
    """Queue ``payload`` for every device of the user; returns the number of rows queued."""
    row = await conn.fetchrow(ENQUEUE, user_id, decision_id, kind, collapse_id, payload)
    return int(row["n"]) if row else 0


# The withdraw of a settled decision in one statement, per device, by the device's latest
# notification of it:
# - still pending and never attempted: it is cancelled (``dead``, "superseded") and the device
#   gets no withdraw, since it never showed anything;
# - sent, in flight (``sending``), or pending a retry after an attempt (which may have reached
#   the device though its answer was lost): the device gets a withdraw, which the claim order
#   keeps behind the notification;
# - dead (given up): nothing was shown, no withdraw.
# ``cancelled`` reports what this statement really cancelled: a notification that a dispatcher
# claimed while this ran is no longer pending, is not cancelled, and so gets its withdraw.
WITHDRAW = """
WITH latest AS (
    SELECT DISTINCT ON (o.device_id) o.id, o.device_id, o.status
    FROM push_outbox AS o
    WHERE o.decision_id = $2 AND o.user_id = $1 AND o.kind = 'notify'
    ORDER BY o.device_id, o.id DESC
), cancelled AS (
    UPDATE push_outbox
       SET status = 'dead', last_error = 'superseded: the decision was settled before delivery'
     WHERE decision_id = $2 AND user_id = $1 AND kind = 'notify' AND status = 'pending'
    RETURNING id, attempts
), queued AS (
    INSERT INTO push_outbox (user_id, device_id, decision_id, kind, collapse_id, payload)
    SELECT d.user_id, d.id, $2, 'withdraw', $3, $4
    FROM latest AS l JOIN push_devices AS d ON d.id = l.device_id
    WHERE d.user_id = $1 AND l.status <> 'dead'
      AND NOT EXISTS (SELECT 1 FROM cancelled AS c WHERE c.id = l.id AND c.attempts = 0)
    RETURNING id
)""" + COUNT_AND_HINT


async def withdraw(conn: asyncpg.Connection, *, user_id: str, decision_id: int,
                   collapse_id: str, payload: dict[str, Any]) -> int:
    """Cancel a decision's pending notifications and queue a withdraw for each device that may
    show one (see ``WITHDRAW``); returns rows queued."""
    row = await conn.fetchrow(WITHDRAW, user_id, decision_id, collapse_id, payload)
    return int(row["n"]) if row else 0


async def claim_due(conn: asyncpg.Connection, *, now: datetime, limit: int,
                    lease_s: float, window: int = 2000) -> list[dict[str, Any]]:
    """Claim up to ``limit`` due rows (with their device) for ``lease_s`` seconds, taking turns
    between the users of the oldest ``window`` ready rows."""
    rows = await conn.fetch(CLAIM_DUE, now, limit, lease_s, max(window, limit))
    return [record_dict(r) for r in rows]


async def extend_leases(conn: asyncpg.Connection, *, held: list[tuple[int, int]],
                        now: datetime, lease_s: float) -> set[int]:
    """Extend the leases of ``(outbox id, attempt)`` rows still held; returns their ids."""
    rows = await conn.fetch(EXTEND_LEASES, [i for i, _ in held], [a for _, a in held], now,
                            lease_s)
    return {int(r["id"]) for r in rows}


async def mark_sent(conn: asyncpg.Connection, *, outbox_id: int, attempt: int,
                    now: datetime) -> bool:
    """Record a delivery; False when this attempt no longer holds the row (lease lost)."""
    return bool(await conn.execute(MARK_SENT, outbox_id, attempt, now) == "UPDATE 1")


async def mark_sent_many(conn: asyncpg.Connection, *, sent: list[tuple[int, int]],
                         now: datetime) -> set[int]:
    """Record ``(outbox id, attempt)`` deliveries; returns the ids this dispatcher still held."""
    rows = await conn.fetch(MARK_SENT_MANY, [i for i, _ in sent], [a for _, a in sent], now)
    return {int(r["id"]) for r in rows}


async def schedule_retry(conn: asyncpg.Connection, *, outbox_id: int, attempt: int,
                         next_attempt_at: datetime, error: str) -> bool:
    """Put a failed row back in the queue for ``next_attempt_at``, keeping the error."""
    result = await conn.execute(SCHEDULE_RETRY, outbox_id, attempt, next_attempt_at, error)
    return bool(result == "UPDATE 1")


async def defer(conn: asyncpg.Connection, *, outbox_id: int, attempt: int,
                at: datetime) -> bool:
    """Put a claimed row back unsent until ``at`` without using up an attempt (a quota)."""
    return bool(await conn.execute(DEFER, outbox_id, attempt, at) == "UPDATE 1")


async def mark_dead(conn: asyncpg.Connection, *, outbox_id: int, attempt: int,
                    error: str) -> bool:
    """Give a row up for good, keeping the error that ended it."""
    return bool(await conn.execute(MARK_DEAD, outbox_id, attempt, error) == "UPDATE 1")


async def save_device(conn: asyncpg.Connection, *, user_id: str, platform: str, address: str,
                      config: dict[str, Any], secret: str | None,
                      max_devices: int | None = None) -> dict[str, Any] | None:
    """Insert a device, or update the user's device with the same address; call in a txn.
    ``None`` when it would be a new device and the user already has ``max_devices``."""
    # serialise registrations per user so two concurrent ones for one address make one row
    await conn.execute(LOCK_USER_DEVICES, user_id)
    config = {**config, "address": address}
    row = await conn.fetchrow(UPDATE_DEVICE, user_id, platform, address, config, secret)
    if row is None:
        if max_devices is not None and await conn.fetchval(COUNT_DEVICES, user_id) >= max_devices:
            return None
        row = await conn.fetchrow(INSERT_DEVICE, user_id, platform, config, secret)
    return record_dict(row)


async def delete_device(conn: asyncpg.Connection, *, user_id: str, device_id: int) -> bool:
    """Remove one of the user's devices (its queued rows go with it); False if none."""
    return bool(await conn.execute(DELETE_DEVICE, device_id, user_id) == "DELETE 1")


async def list_devices(conn: asyncpg.Connection, *, user_id: str) -> list[dict[str, Any]]:
    """The user's devices, oldest first (configs only; secrets stay in the table)."""
    return [record_dict(r) for r in await conn.fetch(LIST_DEVICES, user_id)]
