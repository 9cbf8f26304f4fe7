"""SQL for the sweeps, set-wise: a batch of any size costs a fixed number of statements
(~8 per card once, and 10,000 due cards took 14 s; docs/benchmarks.md). The claims spell
their statuses out for their partial indexes; ``tests/unit/test_machine.py`` checks them
against the transitions table."""

from __future__ import annotations

from datetime import datetime

import asyncpg

from maxclaw.components.rows import ComponentInContext, ComponentRow, SweptComponent
from maxclaw.components.store import COMPONENT_COLUMNS, Key, ToolRow


def _by_message_id(row: ToolRow) -> int:
    return row[1]


# The sweeper's claim: the partial index message_components_due makes this cost what is due.
# A card that expires no later than it is due expires first and never goes to Main, even when
# the sweeps ran late. Its status is written out (not a parameter) because the index predicate
# must be provable from the query's text under a generic plan; tests/unit/test_machine.py
# checks that 'open' is exactly the sweep transitions' from-state.
CLAIM_DUE = f"""
SELECT {COMPONENT_COLUMNS}, m.tool_calls, t.kind AS thread_kind, t.category, t.title AS thread_title
  FROM message_components c
  JOIN messages m ON m.user_id = c.user_id AND m.id = c.message_id
  JOIN threads t ON t.user_id = c.user_id AND t.id = c.thread_id
 WHERE (c.user_id, c.id) IN (SELECT user_id, id FROM message_components
                 WHERE status = 'open' AND due_at IS NOT NULL AND due_at <= $1
                   AND (expires_at IS NULL OR expires_at > due_at)
                 ORDER BY due_at LIMIT $2 FOR UPDATE SKIP LOCKED)
   AND c.status = 'open'
 ORDER BY c.due_at
"""


async def claim_due(conn: asyncpg.Connection, now: datetime,
                    limit: int) -> list[ComponentInContext]:
    """Lock up to ``limit`` due open cards (skipping ones another sweeper holds)."""
    return [ComponentInContext.from_record(r) for r in await conn.fetch(CLAIM_DUE, now, limit)]


# The expiry sweep's claim, through the partial index message_components_expiry (its statuses
# written out for the same reason as CLAIM_DUE's; tests/unit/test_machine.py checks them).
CLAIM_EXPIRED = f"""
SELECT {COMPONENT_COLUMNS}, m.tool_calls, t.kind AS thread_kind, t.category, t.title AS thread_title
  FROM message_components c
  JOIN messages m ON m.user_id = c.user_id AND m.id = c.message_id
  JOIN threads t ON t.user_id = c.user_id AND t.id = c.thread_id
 WHERE (c.user_id, c.id) IN (
           SELECT user_id, id FROM message_components
            WHERE status IN ('open', 'with-main', 'handed-back', 'revoked')
              AND expires_at IS NOT NULL AND expires_at <= $1
            ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)
 ORDER BY c.expires_at
"""
# the claimed rows → $3 (expired), only from $4 (the table's from-states)
EXPIRE_MOVE = f"""
UPDATE message_components c
   SET status = $3, due_at = NULL, main_due_at = NULL, updated_at = now()
  FROM unnest($1::uuid[], $2::text[]) AS x(user_id, id)
 WHERE c.user_id = x.user_id AND c.id = x.id AND c.status = ANY($4::text[])
RETURNING {COMPONENT_COLUMNS}
"""


async def claim_expired(conn: asyncpg.Connection, now: datetime,
                        limit: int) -> list[ComponentInContext]:
    """Lock up to ``limit`` unsettled cards past ``expires_at`` (skipping locked ones)."""
    return [ComponentInContext.from_record(r)
            for r in await conn.fetch(CLAIM_EXPIRED, now, limit)]


async def expire_move(conn: asyncpg.Connection, keys: list[tuple[str, str]], target: str,
                      sources: list[str]) -> dict[tuple[str, str], ComponentRow]:
    """Move the claimed cards (by ``(user_id, id)``) to ``target``, only from ``sources``;
    the rows moved."""
    rows = await conn.fetch(EXPIRE_MOVE, [u for u, _ in keys], [i for _, i in keys], target,
                            sources)
    return {(r["user_id"], r["id"]): ComponentRow.from_record(r) for r in rows}


# ----- the due sweep, set-wise: a batch costs a fixed number of statements, not ~8 per card ----

# The two sweep transitions for the claimed rows: ``to-main`` (x.to_main → $4, Main's time
# to decide up at x.main_due_at) and ``keep-open`` (the others → $5, due time cleared), both
# only from $6 (the table's from-states); a component is named by (user_id, id): ids are the
# caller's and only unique per user
SWEEP_MOVE = """
UPDATE message_components c
   SET status = CASE WHEN x.to_main THEN $4 ELSE $5 END,
       due_at = NULL, main_due_at = x.main_due_at, updated_at = now()
  FROM unnest($1::uuid[], $2::text[], $3::bool[], $7::timestamptz[])
       AS x(user_id, id, to_main, main_due_at)
 WHERE c.user_id = x.user_id AND c.id = x.id AND c.status = ANY($6::text[])
RETURNING c.user_id::text, c.id, c.status, c.answered_by, c.answered_via, c.answer, c.due_at,
          c.decision_id, c.expires_at, c.seen_at, c.withdrawn_reason, c.superseded_by
"""
# Tool rows are locked in id order before any is written: the order answers and other
# sweepers follow, so nobody waits in a cycle.
LOCK_TOOL_ROWS = """
SELECT m.id FROM messages m
  JOIN unnest($1::uuid[], $2::bigint[]) AS x(user_id, id) ON m.user_id = x.user_id AND m.id = x.id
 ORDER BY m.id FOR UPDATE OF m
"""
# one UPDATE mirrors the batch: per tool row, the patch holds the states of its components
MIRROR_MANY = """
UPDATE messages m
   SET display = jsonb_set(m.display, '{states}', (m.display -> 'states') || u.patch)
  FROM unnest($1::uuid[], $2::bigint[], $3::jsonb[]) AS u(user_id, id, patch)
 WHERE m.user_id = u.user_id AND m.id = u.id
"""
AUDIT_MANY = """
INSERT INTO component_audit (user_id, component_id, from_status, to_status, actor, via)
SELECT x.user_id, x.component_id, $3, $4, $5, NULL
  FROM unnest($1::uuid[], $2::text[]) AS x(user_id, component_id)
"""


async def lock_tool_rows(conn: asyncpg.Connection, tool_rows: list[ToolRow]) -> None:
    """Lock tool rows (``(user_id, message id)``) in id order (before a set-wise move, as
    answers lock them)."""
    ordered = sorted(set(tool_rows), key=_by_message_id)
    await conn.execute(LOCK_TOOL_ROWS, [u for u, _ in ordered], [i for _, i in ordered])


async def sweep_move(conn: asyncpg.Connection, to_main: dict[Key, datetime],
                     keep_open: list[Key], *, to_main_target: str, keep_target: str,
                     sources: list[str]) -> dict[Key, SweptComponent]:
    """Move the claimed cards: ``to_main`` (each with the moment Main's time to decide it is
    up) → ``to_main_target``, ``keep_open`` → ``keep_target`` without a due time, both only
    from ``sources``. Returns the new state of each card moved, by ``(user_id, id)``."""
    keys = list(to_main) + keep_open
    rows = await conn.fetch(SWEEP_MOVE, [u for u, _ in keys], [i for _, i in keys],
                            [True] * len(to_main) + [False] * len(keep_open), to_main_target,
                            keep_target, sources,
                            [*to_main.values(), *[None] * len(keep_open)])
    return {(r["user_id"], r["id"]): SweptComponent.from_record(r) for r in rows}


async def mirror_many(conn: asyncpg.Connection,
                      patches: dict[ToolRow, dict[str, dict[str, object]]]) -> None:
    """Patch ``display.states`` of several tool rows (``{(user_id, tool message id): {id:
    state}}``)."""
    ordered = sorted(patches, key=_by_message_id)
    users, ids = [u for u, _ in ordered], [i for _, i in ordered]
    await conn.execute(LOCK_TOOL_ROWS, users, ids)
    await conn.execute(MIRROR_MANY, users, ids, [patches[k] for k in ordered])


async def audit_many(conn: asyncpg.Connection, rows: list[tuple[str, str]], *, from_status: str,
                     to_status: str, actor: str) -> None:
    """Audit one transition of several ``(user_id, component_id)`` (the sweep's hand-overs)."""
    await conn.execute(AUDIT_MANY, [u for u, _ in rows], [c for _, c in rows], from_status,
                       to_status, actor)


# ----- presence re-judged: cards posted while Max watched, once nobody watches -----

# The open cards without a carrier (posted while Max watched their thread) whose thread no live
# client of their user has in focus any more, through the partial index
# message_components_unwatched (its predicate written out, as CLAIM_DUE's). SKIP LOCKED: each
# sweeper takes other cards; one that sees a card after another sweeper committed it re-reads
# the row under its lock and finds its carrier (decision_id set), so it is not taken twice.
CLAIM_UNWATCHED = f"""
SELECT {COMPONENT_COLUMNS}, m.tool_calls, t.kind AS thread_kind, t.category, t.title AS thread_title
  FROM message_components c
  JOIN messages m ON m.user_id = c.user_id AND m.id = c.message_id
  JOIN threads t ON t.user_id = c.user_id AND t.id = c.thread_id
 WHERE (c.user_id, c.id) IN (
           SELECT x.user_id, x.id FROM message_components x
            WHERE x.status = 'open' AND x.decision_id IS NULL
              AND NOT EXISTS (SELECT 1 FROM presence p
                               WHERE p.user_id = x.user_id AND p.thread_id = x.thread_id
                                 AND p.expires_at > $1)
            ORDER BY x.posted_at LIMIT $2 FOR UPDATE OF x SKIP LOCKED)
   AND c.status = 'open' AND c.decision_id IS NULL
 ORDER BY c.posted_at
"""
# their new due time (``main_after_minutes`` from now, or none), only while still open and
# without a carrier ($4: the ``unwatched`` row's from-states); the due clock restarts at $5
UNWATCHED_MOVE = f"""
UPDATE message_components c
   SET due_at = x.due_at, due_from = $5, updated_at = now()
  FROM unnest($1::uuid[], $2::text[], $3::timestamptz[]) AS x(user_id, id, due_at)
 WHERE c.user_id = x.user_id AND c.id = x.id AND c.status = ANY($4::text[])
   AND c.decision_id IS NULL
RETURNING {COMPONENT_COLUMNS}
"""


async def claim_unwatched(conn: asyncpg.Connection, now: datetime,
                          limit: int) -> list[ComponentInContext]:
    """Lock up to ``limit`` open cards without a carrier whose thread nobody watches now."""
    return [ComponentInContext.from_record(r)
            for r in await conn.fetch(CLAIM_UNWATCHED, now, limit)]


async def unwatched_move(conn: asyncpg.Connection, due: dict[Key, datetime | None],
                         sources: list[str], now: datetime) -> dict[Key, ComponentRow]:
    """Give the claimed cards their new due times (their clocks restarted at ``now``);
    returns the rows moved."""
    keys = list(due)
    rows = await conn.fetch(UNWATCHED_MOVE, [u for u, _ in keys], [i for _, i in keys],
                            [due[k] for k in keys], sources, now)
    return {(r["user_id"], r["id"]): ComponentRow.from_record(r) for r in rows}


# ----- Main's time to decide is up: the main-timeout sweep -----

# The cards with Main whose time to decide is up, through the partial index
# message_components_main_due (its status written out, as CLAIM_DUE's; tests/unit/
# test_machine.py checks it against the main-timeout row). A card that has expired by now is
# left to the expiry sweep (it ends; it does not go back to Max). SKIP LOCKED and the status
# re-checked under the lock: a card another sweeper handed back (or Max answered) meanwhile
# is not claimed again.
CLAIM_MAIN_TIMEOUT = f"""
SELECT {COMPONENT_COLUMNS}, m.tool_calls, t.kind AS thread_kind, t.category, t.title AS thread_title
  FROM message_components c
  JOIN messages m ON m.user_id = c.user_id AND m.id = c.message_id
  JOIN threads t ON t.user_id = c.user_id AND t.id = c.thread_id
 WHERE (c.user_id, c.id) IN (
           SELECT user_id, id FROM message_components
            WHERE status = 'with-main' AND main_due_at <= $1
              AND (expires_at IS NULL OR expires_at > $1)
            ORDER BY main_due_at LIMIT $2 FOR UPDATE SKIP LOCKED)
   AND c.status = 'with-main'
 ORDER BY c.main_due_at
"""
# the claimed rows → $3 (handed-back) with the note $5 as main_reason (what Max reads as
# Main's note), only from $4 (the table's from-states); Main's clock cleared
MAIN_TIMEOUT_MOVE = f"""
UPDATE message_components c
   SET status = $3, main_reason = $5, main_due_at = NULL, due_at = NULL, updated_at = now()
  FROM unnest($1::uuid[], $2::text[]) AS x(user_id, id)
 WHERE c.user_id = x.user_id AND c.id = x.id AND c.status = ANY($4::text[])
RETURNING {COMPONENT_COLUMNS}
"""


async def claim_main_timeout(conn: asyncpg.Connection, now: datetime,
                             limit: int) -> list[ComponentInContext]:
    """Lock up to ``limit`` cards with Main whose time to decide is up (skipping locked ones)."""
    return [ComponentInContext.from_record(r)
            for r in await conn.fetch(CLAIM_MAIN_TIMEOUT, now, limit)]


async def main_timeout_move(conn: asyncpg.Connection, keys: list[Key], target: str,
                            sources: list[str], note: str) -> dict[Key, ComponentRow]:
    """Hand the claimed cards (by ``(user_id, id)``) back: ``target`` with ``note``, only from
    ``sources``; the rows moved."""
    rows = await conn.fetch(MAIN_TIMEOUT_MOVE, [u for u, _ in keys], [i for _, i in keys],
                            target, sources, note)
    return {(r["user_id"], r["id"]): ComponentRow.from_record(r) for r in rows}
