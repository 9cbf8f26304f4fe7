"""SQL for push: devices, and the outbox's write side (enqueue) and work side (claim, settle).

The outbox is a queue in PostgreSQL. Rows are written inside the transaction that creates or
settles a decision, and dispatchers claim them with ``FOR UPDATE SKIP LOCKED`` plus a lease:
a claimed row is ``sending`` until ``lease_until``; a dispatcher that dies mid-send leaves the
lease to lapse, and any dispatcher may claim the row again. Every write that follows a send is
fenced by the attempt number it claimed, so a dispatcher that lost its lease changes nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime

import asyncpg

from maxclaw.push.rows import ClaimedRow, DeviceRow, NewPush

FIRST_USER = str(uuid.UUID(int=0))  # a claim round from the smallest user id
Held = tuple[str, int, int]  # a claimed row: (user id, outbox id, attempt claimed)

# -- enqueue: one row per registered device of the user, in one statement --------------------
# Every enqueue ends the same way: ``counted`` counts the rows its ``queued`` CTE inserted and,
# when there are any, sends the hint that wakes LISTENing dispatchers. The hint is skipped when
# nothing was queued or when the caller switched notifications off for its transaction
# (polling still finds the rows). The tail is written out in each statement (ENQUEUE,
# ENQUEUE_MANY, WITHDRAW, sample_notification.ENQUEUE_TEST) so each reads whole where it is
# defined; tests/unit/test_architecture.py fails on a statement assembled from fragments.
ENQUEUE = """
WITH queued AS (
    INSERT INTO push_outbox (user_id, device_id, decision_id, kind, collapse_id, payload)
    SELECT d.user_id, d.id, $2, $3, $4, $5
    FROM push_devices AS d
    WHERE d.user_id = $1
    RETURNING id
), counted AS (SELECT count(*) AS n FROM queued)
SELECT n, CASE WHEN n > 0 AND current_setting('maxclaw.notify', true) IS DISTINCT FROM 'off'
               THEN pg_notify('maxclaw_push', '') END AS hint
FROM counted
"""

# -- claim: due rows, fairly between users, never two rows of one (decision, device) at once --
# A 'sending' row's next_attempt_at is its lease end, so one partial index serves both fresh
# rows and rows whose lease lapsed. The claim costs what it takes, not what is queued: it walks
# ``push_outbox_user_ready (user_id, next_attempt_at, id)`` and never reads the whole backlog
# (the previous claim sorted the oldest 2,000 ready rows by user on every call, and that sort
# was the dispatcher's ceiling).
# - ``visit``: the users with a due row, one index probe each (a loose index scan), at most
#   ``$2``, in round-robin order: after ``$4`` (the last user the dispatcher served), then
#   wrapping to the smallest id, so no user waits behind more than one round of the others.
# - ``share``: each visited user may send an equal share of the claim (at least one row), so
#   one user's thousand devices take one share, not every slot, and another user's single
#   push goes out in the same claim. A user with fewer due rows leaves its share unused; the
#   dispatcher claims again while rows come back.
# - per user, the oldest due rows, skipping (not waiting for) rows another dispatcher holds.
#   The NOT EXISTS keeps each (decision, device) in id order: a withdraw never overtakes the
#   notification it withdraws, and a reopened decision's new notification never overtakes
#   the withdraw.
CLAIM_DUE = """
WITH RECURSIVE visit (user_id, wrapped, n) AS (
    SELECT $4::uuid, false, 0
    UNION ALL
    SELECT nxt.user_id, nxt.wrapped, v.n + 1
    FROM visit AS v CROSS JOIN LATERAL (
        (SELECT o.user_id, v.wrapped FROM push_outbox AS o
          WHERE o.status IN ('pending', 'sending') AND o.next_attempt_at <= $1
            AND o.user_id > v.user_id AND (NOT v.wrapped OR o.user_id <= $4)
          ORDER BY o.user_id, o.next_attempt_at, o.id LIMIT 1)
        UNION ALL
        (SELECT o.user_id, true FROM push_outbox AS o
          WHERE o.status IN ('pending', 'sending') AND o.next_attempt_at <= $1
            AND NOT v.wrapped AND o.user_id <= $4
          ORDER BY o.user_id, o.next_attempt_at, o.id LIMIT 1)
        LIMIT 1
    ) AS nxt (user_id, wrapped)
    WHERE v.n < $2
), share AS (
    SELECT greatest(1, $2 / greatest(count(*), 1))::int AS k FROM visit WHERE n > 0
), due AS (
    SELECT v.user_id, c.id
    FROM visit AS v CROSS JOIN share AS s CROSS JOIN LATERAL (
        SELECT o.id FROM push_outbox AS o
        WHERE o.user_id = v.user_id AND o.status IN ('pending', 'sending')
          AND o.next_attempt_at <= $1
          AND (o.decision_id IS NULL OR NOT EXISTS (
              SELECT 1 FROM push_outbox AS e
              WHERE e.user_id = o.user_id AND e.decision_id = o.decision_id
                AND e.device_id = o.device_id AND e.id < o.id
                AND e.status IN ('pending', 'sending')))
        ORDER BY o.next_attempt_at, o.id
        LIMIT s.k
        FOR UPDATE OF o SKIP LOCKED
    ) AS c
    WHERE v.n > 0
)
UPDATE push_outbox AS o
SET status = 'sending', attempts = o.attempts + 1,
    lease_until = $1 + make_interval(secs => $3),
    next_attempt_at = $1 + make_interval(secs => $3)
FROM push_devices AS d
WHERE o.user_id = ANY (ARRAY(SELECT user_id FROM due)) AND o.id = ANY (ARRAY(SELECT id FROM due))
  AND d.user_id = o.user_id AND d.id = o.device_id
RETURNING o.id, o.user_id::text, o.device_id, o.decision_id, o.kind, o.collapse_id, o.payload,
          o.attempts, o.lease_until, d.platform, d.config, d.secret,
          -- his settings (locale, quiet hours) shape the push as it goes out (push/shaping.py)
          (SELECT to_jsonb(u) FROM user_settings AS u WHERE u.user_id = o.user_id) AS prefs
"""

# the heartbeat: a live dispatcher extends the lease of every row it still holds (fenced by
# the attempt it claimed), so a slow endpoint keeps its row instead of being raced by another
# dispatcher once a short lease runs out
EXTEND_LEASES = """
UPDATE push_outbox AS o
SET lease_until = $4::timestamptz + make_interval(secs => $5),
    next_attempt_at = $4::timestamptz + make_interval(secs => $5)
FROM unnest($1::uuid[], $2::bigint[], $3::int[]) AS s(user_id, id, attempt)
WHERE o.user_id = s.user_id AND o.id = s.id AND o.status = 'sending'
  AND o.attempts = s.attempt
RETURNING o.id
"""

MARK_SENT = """
UPDATE push_outbox SET status = 'sent', sent_at = $4, lease_until = NULL
WHERE user_id = $1 AND id = $2 AND status = 'sending' AND attempts = $3
"""

# the deliveries that completed since the last acknowledgement, in one statement (a group
# commit: one commit for whatever finished while the previous one was being written)
MARK_SENT_MANY = """
UPDATE push_outbox AS o SET status = 'sent', sent_at = $4, lease_until = NULL
FROM unnest($1::uuid[], $2::bigint[], $3::int[]) AS s(user_id, id, attempt)
WHERE o.user_id = s.user_id AND o.id = s.id AND o.status = 'sending'
  AND o.attempts = s.attempt
RETURNING o.id
"""

# A failed attempt goes back in the queue for a retry — unless it is a notification whose
# decision was settled while it was in flight: the withdraw queued behind it (WITHDRAW counts a
# notification in flight as shown) is what the device needs now, so the notification is not
# sent again but given up as superseded (dead, its attempt kept: it may have reached the
# device, and the withdraw stands). Retrying it would show a settled question and then take
# it back; left pending, it sat before its own withdraw until its backoff ran out.
SCHEDULE_RETRY = """
UPDATE push_outbox AS o
SET status = CASE WHEN s.superseded THEN 'dead' ELSE 'pending' END,
    next_attempt_at = $4, lease_until = NULL,
    last_error = CASE WHEN s.superseded
                      THEN 'superseded: the decision was settled during a failed attempt ('
                           || $5 || ')'
                      ELSE $5 END
FROM (SELECT o2.id, o2.kind = 'notify' AND EXISTS (
             SELECT 1 FROM push_outbox AS w
              WHERE w.user_id = o2.user_id AND w.decision_id = o2.decision_id
                AND w.device_id = o2.device_id AND w.kind = 'withdraw' AND w.id > o2.id)
             AS superseded
        FROM push_outbox AS o2 WHERE o2.user_id = $1 AND o2.id = $2) AS s
WHERE o.user_id = $1 AND o.id = s.id AND o.status = 'sending' AND o.attempts = $3
RETURNING o.status
"""

DEFER = """
UPDATE push_outbox
SET status = 'pending', attempts = attempts - 1, next_attempt_at = $4, lease_until = NULL
WHERE user_id = $1 AND id = $2 AND status = 'sending' AND attempts = $3
"""

MARK_DEAD = """
UPDATE push_outbox SET status = 'dead', lease_until = NULL, last_error = $4
WHERE user_id = $1 AND id = $2 AND status = 'sending' AND attempts = $3
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

DELETE_DEVICE = "DELETE FROM push_devices WHERE user_id = $1 AND id = $2"

# the user's Live Activities brought up to date (db/live.sql); the decisions triggers call the
# same function when a decision opens or settles
REFRESH_LIVE_ACTIVITIES = "SELECT maxclaw_refresh_live_activities(ARRAY[$1::uuid])"

# a Live Activity token APNs called dead (410), only if the device still holds that token
FORGET_ACTIVITY_TOKEN = """
UPDATE push_devices
   SET config = config - (CASE WHEN config ->> 'live_activity_token' = $3
                               THEN 'live_activity_token' ELSE 'live_activity_start_token' END)
 WHERE user_id = $1 AND id = $2
   AND $3 IN (config ->> 'live_activity_token', config ->> 'live_activity_start_token')
"""

LIST_DEVICES = """
SELECT id, platform, config, created_at FROM push_devices WHERE user_id = $1 ORDER BY id
"""


# Many decisions' notifications at once (the carriers of a card posted without the fast path,
# the due sweep's batches): one row per (item, device). $1 is the items, a JSON array of objects
# (``enqueue_many``).
# Each item's devices are read by its user (the LATERAL, kept apart from the join by OFFSET 0):
# the generic plan, which knows neither how many items nor whose, otherwise hashed every
# device of every user (on a schema partitioned by user, every partition). The items come
# through jsonb_to_recordset, whose rows are estimated alike whatever its argument (an unnest
# of a known array is costed by its length): so the generic plan is kept after five calls,
# not this statement planned again on every call (components/post_store.py, POST_CARDS).
ENQUEUE_MANY = """
WITH queued AS (
    INSERT INTO push_outbox (user_id, device_id, decision_id, kind, collapse_id, payload)
    SELECT d.user_id, d.id, x.decision_id, x.kind, x.collapse_id, x.payload
    FROM jsonb_to_recordset($1::jsonb)
         AS x(user_id uuid, decision_id bigint, kind text, collapse_id text, payload jsonb)
    CROSS JOIN LATERAL (SELECT d.user_id, d.id FROM push_devices AS d
                         WHERE d.user_id = x.user_id OFFSET 0) AS d
    RETURNING id
), counted AS (SELECT count(*) AS n FROM queued)
SELECT n, CASE WHEN n > 0 AND current_setting('maxclaw.notify', true) IS DISTINCT FROM 'off'
               THEN pg_notify('maxclaw_push', '') END AS hint
FROM counted
"""


async def enqueue_many(conn: asyncpg.Connection, items: list[NewPush]) -> int:
    """Queue several payloads for every device of their users in one statement; returns the
    number of rows queued."""
    if not items:
        return 0
    row = await conn.fetchrow(ENQUEUE_MANY, [
        {"user_id": i.user_id, "decision_id": i.decision_id, "kind": i.kind,
         "collapse_id": i.collapse_id, "payload": i.payload} for i in items])
    return int(row["n"]) if row else 0


async def enqueue(conn: asyncpg.Connection, *, user_id: str, decision_id: int | None,
                  kind: str, collapse_id: str | None, payload: dict[str, object]) -> int:
    """Queue ``payload`` for every device of the user; returns the number of rows queued."""
    row = await conn.fetchrow(ENQUEUE, user_id, decision_id, kind, collapse_id, payload)
    return int(row["n"]) if row else 0


# The withdraw of a settled decision in one statement, per device, by the newest of the
# device's rows for it that may be showing (``shown``):
# - a notification still pending and never attempted is cancelled (``dead``, "superseded")
#   and does not count: it never showed anything;
# - a notification given up (dead, never delivered) does not count either;
# - so the newest row left decides: a notification (sent, in flight, or pending a retry
#   after an attempt that may have reached the device) gets a withdraw, which the claim order
#   keeps behind it; a withdraw, or nothing, gets none.
# Counting every row, not only the newest notification, matters when a notification replaced
# an earlier one of the same decision: the newer one cancelled unsent leaves the older one
# showing, and it needs its withdraw (tests/reliability/test_db_faults.py found a decision
# settled with its sent notification never withdrawn). ``cancelled`` reports what this
# statement really cancelled: a notification that a dispatcher claimed while this ran is no
# longer pending, is not cancelled, and so still counts.
WITHDRAW = """
WITH cancelled AS (
    UPDATE push_outbox AS o
       SET status = 'dead', last_error = 'superseded: the decision was settled before delivery'
     WHERE o.user_id = $1 AND o.decision_id = $2
       AND o.kind = 'notify' AND o.status = 'pending'
    RETURNING o.id, o.attempts
), shown AS (
    SELECT DISTINCT ON (o.device_id) o.device_id, o.kind
      FROM push_outbox AS o
     WHERE o.user_id = $1 AND o.decision_id = $2
       AND NOT (o.kind = 'notify' AND o.status = 'dead'
                AND (o.attempts = 0 OR coalesce(o.last_error, '') NOT LIKE 'superseded%'))
       AND NOT EXISTS (SELECT 1 FROM cancelled AS c WHERE c.id = o.id AND c.attempts = 0)
     ORDER BY o.device_id DESC, o.id DESC
), queued AS (
    INSERT INTO push_outbox (user_id, device_id, decision_id, kind, collapse_id, payload)
    SELECT d.user_id, d.id, $2, 'withdraw', $3, $4
      FROM shown AS l JOIN push_devices AS d ON d.user_id = $1 AND d.id = l.device_id
     WHERE l.kind = 'notify'
    RETURNING id
),
counted AS (SELECT count(*) AS n FROM queued)
SELECT n, CASE WHEN n > 0 AND current_setting('maxclaw.notify', true) IS DISTINCT FROM 'off'
               THEN pg_notify('maxclaw_push', '') END AS hint
FROM counted
"""


async def withdraw(conn: asyncpg.Connection, *, user_id: str, decision_id: int,
                   collapse_id: str, payload: dict[str, object]) -> int:
    """Cancel a decision's pending notifications and queue a withdraw for each device that may
    show one (see ``WITHDRAW``); returns rows queued."""
    row = await conn.fetchrow(WITHDRAW, user_id, decision_id, collapse_id, payload)
    return int(row["n"]) if row else 0


async def claim_due(conn: asyncpg.Connection, *, now: datetime, limit: int, lease_s: float,
                    after_user: str = FIRST_USER) -> list[ClaimedRow]:
    """Claim up to ``limit`` due rows (with their device) for ``lease_s`` seconds, an equal
    share for each of up to ``limit`` users, taken in turn from the user after ``after_user``."""
    rows = await conn.fetch(CLAIM_DUE, now, limit, lease_s, after_user)
    return [ClaimedRow.from_record(r) for r in rows]


def next_cursor(after_user: str, claimed_users: Iterable[str]) -> str:
    """Where the next claim's round starts: the last of ``claimed_users`` (the users a claim
    from ``after_user`` served) in that claim's order (after ``after_user``, then from the
    smallest id)."""
    users = {uuid.UUID(str(u)) for u in claimed_users}
    if not users:
        return after_user
    wrapped = [u for u in users if u <= uuid.UUID(after_user)]
    return str(max(wrapped) if wrapped else max(users))


async def extend_leases(conn: asyncpg.Connection, *, held: list[Held], now: datetime,
                        lease_s: float) -> set[int]:
    """Extend the leases of ``(user id, outbox id, attempt)`` rows still held; returns the
    outbox ids still held."""
    held = sorted(held, key=_lock_order)  # id order in every multi-row write (mark_sent_many)
    rows = await conn.fetch(EXTEND_LEASES, *_columns(held), now, lease_s)
    return {int(r["id"]) for r in rows}


async def mark_sent(conn: asyncpg.Connection, *, user_id: str, outbox_id: int, attempt: int,
                    now: datetime) -> bool:
    """Record a delivery; False when this attempt no longer holds the row (lease lost)."""
    result = await conn.execute(MARK_SENT, user_id, outbox_id, attempt, now)
    return bool(result == "UPDATE 1")


async def mark_sent_many(conn: asyncpg.Connection, *, sent: list[Held],
                         now: datetime) -> set[int]:
    """Record ``(user id, outbox id, attempt)`` deliveries; returns the outbox ids this
    dispatcher still held."""
    # in id order, as the heartbeat's: two writes that lock the same rows in opposite orders
    # could deadlock, and the one PostgreSQL aborts would leave a delivered row to be re-sent
    sent = sorted(sent, key=_lock_order)
    rows = await conn.fetch(MARK_SENT_MANY, *_columns(sent), now)
    return {int(r["id"]) for r in rows}


def _lock_order(row: Held) -> int:
    return row[1]


def _columns(rows: list[Held]) -> tuple[list[str], list[int], list[int]]:
    return [u for u, _, _ in rows], [i for _, i, _ in rows], [a for _, _, a in rows]


async def schedule_retry(conn: asyncpg.Connection, *, user_id: str, outbox_id: int,
                         attempt: int, next_attempt_at: datetime, error: str) -> str | None:
    """Put a failed row back in the queue for ``next_attempt_at``, keeping the error; returns
    'pending', or 'dead' for a notification its decision's withdraw follows (given up:
    ``SCHEDULE_RETRY``), or None when the row was no longer this attempt's."""
    status: str | None = await conn.fetchval(SCHEDULE_RETRY, user_id, outbox_id, attempt,
                                             next_attempt_at, error)
    return status


async def defer(conn: asyncpg.Connection, *, user_id: str, outbox_id: int, attempt: int,
                at: datetime) -> bool:
    """Put a claimed row back unsent until ``at`` without using up an attempt (a quota)."""
    return bool(await conn.execute(DEFER, user_id, outbox_id, attempt, at) == "UPDATE 1")


async def mark_dead(conn: asyncpg.Connection, *, user_id: str, outbox_id: int, attempt: int,
                    error: str) -> bool:
    """Give a row up for good, keeping the error that ended it."""
    result = await conn.execute(MARK_DEAD, user_id, outbox_id, attempt, error)
    return bool(result == "UPDATE 1")


async def save_device(conn: asyncpg.Connection, *, user_id: str, platform: str, address: str,
                      config: dict[str, object], secret: str | None,
                      max_devices: int | None = None) -> DeviceRow | None:
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
    return DeviceRow.from_record(row)


async def refresh_live_activities(conn: asyncpg.Connection, *, user_id: str) -> int:
    """Queue each of the user's APNs devices its Live Activity's current state (start, update
    or end, as due); returns rows queued."""
    return int(await conn.fetchval(REFRESH_LIVE_ACTIVITIES, user_id) or 0)


async def forget_activity_token(conn: asyncpg.Connection, *, user_id: str, device_id: int,
                                token: str) -> bool:
    """Drop a dead Live Activity (or push-to-start) token from the device; False when the
    device no longer holds it (re-registered meanwhile)."""
    result = await conn.execute(FORGET_ACTIVITY_TOKEN, user_id, device_id, token)
    return bool(result == "UPDATE 1")


async def delete_device(conn: asyncpg.Connection, *, user_id: str, device_id: int) -> bool:
    """Remove one of the user's devices (its queued rows go with it); False if none."""
    return bool(await conn.execute(DELETE_DEVICE, user_id, device_id) == "DELETE 1")


async def list_devices(conn: asyncpg.Connection, *, user_id: str) -> list[DeviceRow]:
    """The user's devices, oldest first (configs only; secrets stay in the table)."""
    return [DeviceRow.from_record(r) for r in await conn.fetch(LIST_DEVICES, user_id)]
