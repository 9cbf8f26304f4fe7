"""SQL for cards: component rows, the CAS transitions, the display mirror, the audit trail.

Every transition is one statement, ``TRANSITION``: ``UPDATE … WHERE id = $1 AND user_id = $2
AND status = ANY($3) RETURNING *`` with its mirror and audit row, the from-states coming from
``components/machine.py``. No row back means another surface got there first, and nothing was
written. The due sweep moves a batch set-wise (``SWEEP_MOVE``, ``MIRROR_MANY``, ``AUDIT_MANY``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import asyncpg

COMPONENT_COLUMNS = (
    "c.id, c.user_id::text, c.thread_id::text, c.message_id, c.tool_message_id, c.kind,"
    " c.stakes, c.sensitive, c.status, c.answer, c.answered_by, c.answered_via, c.main_reason,"
    " c.due_at, c.decision_id, c.posted_at, c.answered_at, c.seen_at, c.expires_at,"
    " c.withdrawn_reason, c.superseded_by"
)
# the component with what its rules need: the call that defines it and its thread
GET_WITH_CONTEXT = f"""
SELECT {COMPONENT_COLUMNS}, m.tool_calls, t.kind AS thread_kind, t.category, t.title AS thread_title
  FROM message_components c
  JOIN messages m ON m.id = c.message_id
  JOIN threads t ON t.id = c.thread_id
 WHERE c.id = $1 AND c.user_id = $2::uuid
"""
STATUS_OF = "SELECT status FROM message_components WHERE id = $1 AND user_id = $2::uuid"
INSERT_COMPONENTS = """
INSERT INTO message_components (id, user_id, thread_id, message_id, tool_message_id, kind, stakes,
                                sensitive, due_at, decision_id, expires_at)
SELECT * FROM unnest($1::text[], $2::uuid[], $3::uuid[], $4::bigint[], $5::bigint[], $6::text[],
                     $7::text[], $8::bool[], $9::timestamptz[], $10::bigint[], $11::timestamptz[])
"""
# Every transition, in one statement: lock the row, CAS it, patch the mirror, append the audit
# row. prev's FOR UPDATE waits for a concurrent writer and then sees its committed status, so
# the CAS and the audit's from_status are judged on the latest state. The mirror and audit
# CTEs only touch rows when upd returned one: a lost CAS writes nothing.
#   $1 id, $2 user_id, $3 from-states (the transitions table's), $4 to-state,
#   $5 set_answer: write $6..$8 into answer/answered_by/answered_via (NULLs clear them),
#   $9 a note for main_reason (NULL keeps it), $10 actor, $11 the audit's via,
#   $12 the statuses the card itself answers from (``answerable_here`` in the mirror),
#   $13 ``main_may_take`` in the mirror, $14/$15 why it was withdrawn and by which card
#   (NULL keeps them).
# The mirrored state is built from the updated row, so display.states cannot disagree with it.
TRANSITION = f"""
WITH prev AS (
    SELECT id, status FROM message_components WHERE id = $1 AND user_id = $2::uuid FOR UPDATE
), upd AS (
    UPDATE message_components c
       SET status = $4,
           answer = CASE WHEN $5 THEN $6::jsonb ELSE c.answer END,
           answered_by = CASE WHEN $5 THEN $7::text ELSE c.answered_by END,
           answered_via = CASE WHEN $5 THEN $8::text ELSE c.answered_via END,
           answered_at = CASE WHEN NOT $5 THEN c.answered_at
                              WHEN $6::jsonb IS NULL THEN NULL ELSE now() END,
           main_reason = coalesce($9::text, c.main_reason),
           withdrawn_reason = coalesce($14::text, c.withdrawn_reason),
           superseded_by = coalesce($15::text, c.superseded_by),
           due_at = NULL, updated_at = now()
      FROM prev
     WHERE c.user_id = $2::uuid AND c.id = prev.id AND prev.status = ANY($3::text[])
    RETURNING {COMPONENT_COLUMNS}, prev.status AS from_status
), mirror AS (
    UPDATE messages m
       SET display = jsonb_set(m.display, ARRAY['states', upd.id], jsonb_build_object(
               'status', upd.status, 'answered_by', upd.answered_by,
               'answered_via', upd.answered_via, 'answer', upd.answer, 'due_at', upd.due_at,
               'expires_at', upd.expires_at,
               'answerable_here', upd.status = ANY($12::text[]), 'main_may_take', $13::bool,
               'withdrawn_reason', upd.withdrawn_reason, 'superseded_by', upd.superseded_by))
      FROM upd WHERE m.id = upd.tool_message_id
), audit AS (
    INSERT INTO component_audit (user_id, component_id, from_status, to_status, actor, via)
    SELECT upd.user_id::uuid, upd.id, upd.from_status, upd.status, $10, $11 FROM upd
)
SELECT * FROM upd
"""
SET_DECISION = """
UPDATE message_components SET decision_id = $3 WHERE id = $1 AND user_id = $2::uuid
"""
THREAD_COMPONENTS = """
SELECT id FROM message_components
 WHERE user_id = $1::uuid AND thread_id = $2::uuid AND status = ANY($3::text[])
 ORDER BY posted_at, id
"""
# The sweeper's claim: the partial index message_components_due makes this cost what is due.
# Its status is written out (not a parameter) because the index predicate must be provable from
# the query's text under a generic plan; tests/unit/test_machine.py checks that 'open' is
# exactly the sweep transitions' from-state.
CLAIM_DUE = f"""
SELECT {COMPONENT_COLUMNS}, m.tool_calls, t.kind AS thread_kind, t.category, t.title AS thread_title
  FROM message_components c
  JOIN messages m ON m.id = c.message_id
  JOIN threads t ON t.id = c.thread_id
 WHERE (c.user_id, c.id) IN (SELECT user_id, id FROM message_components
                 WHERE status = 'open' AND due_at IS NOT NULL AND due_at <= $1
                 ORDER BY due_at LIMIT $2 FOR UPDATE SKIP LOCKED)
   AND c.status = 'open'
 ORDER BY c.due_at
"""


async def get_with_context(conn: asyncpg.Connection, user_id: str,
                           component_id: str) -> dict[str, Any] | None:
    """A component with its defining tool calls and its thread's kind, category and title."""
    row = await conn.fetchrow(GET_WITH_CONTEXT, component_id, user_id)
    return dict(row) if row else None


async def status_of(conn: asyncpg.Connection, user_id: str, component_id: str) -> str | None:
    value = await conn.fetchval(STATUS_OF, component_id, user_id)
    return str(value) if value else None


async def insert_components(conn: asyncpg.Connection, rows: list[dict[str, Any]]) -> None:
    """Insert a card's component rows in one statement."""
    cols = ("id", "user_id", "thread_id", "message_id", "tool_message_id", "kind", "stakes",
            "sensitive", "due_at", "decision_id", "expires_at")
    await conn.execute(INSERT_COMPONENTS, *[[r[c] for r in rows] for c in cols])


async def transition(conn: asyncpg.Connection, user_id: str, component_id: str, *,
                     sources: list[str], target: str, actor: str, via: str | None,
                     answerable_here: list[str], main_may_take: bool = False,
                     set_answer: bool = False, answer: dict[str, Any] | None = None,
                     answered_by: str | None = None, answered_via: str | None = None,
                     main_note: str | None = None, withdrawn_reason: str | None = None,
                     superseded_by: str | None = None) -> dict[str, Any] | None:
    """One transition (``TRANSITION``): the CAS from ``sources`` to ``target``, the mirror and
    the audit row; None if the CAS lost (and then nothing was written). ``set_answer`` writes
    ``answer``/``answered_by``/``answered_via`` (all None: the answer is cleared)."""
    row = await conn.fetchrow(TRANSITION, component_id, user_id, sources, target, set_answer,
                              answer, answered_by, answered_via, main_note, actor, via,
                              answerable_here, main_may_take, withdrawn_reason, superseded_by)
    return dict(row) if row else None


async def set_decision(conn: asyncpg.Connection, user_id: str, component_id: str,
                       decision_id: int) -> None:
    await conn.execute(SET_DECISION, component_id, user_id, decision_id)


THREAD_CARD = """
SELECT id, status FROM message_components
 WHERE user_id = $1::uuid AND thread_id = $2::uuid AND left(id, length($3) + 1) = $3 || ':'
   AND strpos(substr(id, length($3) + 2), ':') = 0
 ORDER BY id
"""


async def card_components(conn: asyncpg.Connection, user_id: str, thread_id: str,
                          tool_call_id: str) -> list[dict[str, Any]]:
    """The ``(id, status)`` of a card's components in one thread."""
    return [dict(r) for r in await conn.fetch(THREAD_CARD, user_id, thread_id, tool_call_id)]


async def thread_components(conn: asyncpg.Connection, user_id: str, thread_id: str,
                            statuses: list[str]) -> list[str]:
    return [r["id"] for r in await conn.fetch(THREAD_COMPONENTS, user_id, thread_id, statuses)]


async def claim_due(conn: asyncpg.Connection, now: datetime, limit: int) -> list[dict[str, Any]]:
    """Lock up to ``limit`` due open cards (skipping ones another sweeper holds)."""
    return [dict(r) for r in await conn.fetch(CLAIM_DUE, now, limit)]


# The expiry sweep's claim, through the partial index message_components_expiry (its statuses
# written out for the same reason as CLAIM_DUE's; tests/unit/test_machine.py checks them).
CLAIM_EXPIRED = f"""
SELECT {COMPONENT_COLUMNS}, m.tool_calls, t.kind AS thread_kind, t.category, t.title AS thread_title
  FROM message_components c
  JOIN messages m ON m.id = c.message_id
  JOIN threads t ON t.id = c.thread_id
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
   SET status = $3, due_at = NULL, updated_at = now()
  FROM unnest($1::uuid[], $2::text[]) AS x(user_id, id)
 WHERE c.user_id = x.user_id AND c.id = x.id AND c.status = ANY($4::text[])
RETURNING {COMPONENT_COLUMNS}
"""


async def claim_expired(conn: asyncpg.Connection, now: datetime,
                        limit: int) -> list[dict[str, Any]]:
    """Lock up to ``limit`` unsettled cards past ``expires_at`` (skipping locked ones)."""
    return [dict(r) for r in await conn.fetch(CLAIM_EXPIRED, now, limit)]


async def expire_move(conn: asyncpg.Connection, keys: list[tuple[str, str]], target: str,
                      sources: list[str]) -> dict[tuple[str, str], dict[str, Any]]:
    rows = await conn.fetch(EXPIRE_MOVE, [u for u, _ in keys], [i for _, i in keys], target,
                            sources)
    return {(r["user_id"], r["id"]): dict(r) for r in rows}


# ----- the due sweep, set-wise: a batch costs a fixed number of statements, not ~8 per card ----

# The two sweep transitions for the claimed rows: ``to-main`` (x.to_main → $4) and
# ``keep-open`` (the others → $5, due time cleared), both only from $6 (the table's
# from-states); a component is named by (user_id, id): ids are the caller's and only unique
# per user
SWEEP_MOVE = """
UPDATE message_components c
   SET status = CASE WHEN x.to_main THEN $4 ELSE $5 END,
       due_at = NULL, updated_at = now()
  FROM unnest($1::uuid[], $2::text[], $3::bool[]) AS x(user_id, id, to_main)
 WHERE c.user_id = x.user_id AND c.id = x.id AND c.status = ANY($6::text[])
RETURNING c.user_id::text, c.id, c.status, c.answered_by, c.answered_via, c.answer, c.due_at,
          c.decision_id
"""
# Tool rows are locked in id order before any is written: the order answers and other
# sweepers follow, so nobody waits in a cycle.
LOCK_TOOL_ROWS = "SELECT id FROM messages WHERE id = ANY($1::bigint[]) ORDER BY id FOR UPDATE"
# one UPDATE mirrors the batch: per tool row, the patch holds the states of its components
MIRROR_MANY = """
UPDATE messages m
   SET display = jsonb_set(m.display, '{states}', (m.display -> 'states') || u.patch)
  FROM unnest($1::bigint[], $2::jsonb[]) AS u(id, patch)
 WHERE m.id = u.id
"""
SET_DECISIONS = """
UPDATE message_components c SET decision_id = x.decision_id
  FROM unnest($1::uuid[], $2::text[], $3::bigint[]) AS x(user_id, id, decision_id)
 WHERE c.user_id = x.user_id AND c.id = x.id AND c.decision_id IS NULL
"""
AUDIT_MANY = """
INSERT INTO component_audit (user_id, component_id, from_status, to_status, actor, via)
SELECT x.user_id, x.component_id, $3, $4, $5, NULL
  FROM unnest($1::uuid[], $2::text[]) AS x(user_id, component_id)
"""


Key = tuple[str, str]  # (user_id, component id)


async def sweep_move(conn: asyncpg.Connection, to_main: list[Key], keep_open: list[Key], *,
                     to_main_target: str, keep_target: str,
                     sources: list[str]) -> dict[Key, dict[str, Any]]:
    """Move the claimed cards: ``to_main`` → ``to_main_target``, ``keep_open`` →
    ``keep_target`` without a due time, both only from ``sources``. Returns the new state of
    each card moved, by ``(user_id, id)``."""
    keys = to_main + keep_open
    rows = await conn.fetch(SWEEP_MOVE, [u for u, _ in keys], [i for _, i in keys],
                            [True] * len(to_main) + [False] * len(keep_open), to_main_target,
                            keep_target, sources)
    return {(r["user_id"], r["id"]): dict(r) for r in rows}


async def mirror_many(conn: asyncpg.Connection, patches: dict[int, dict[str, Any]]) -> None:
    """Patch ``display.states`` of several tool rows (``{tool_message_id: {id: state}}``)."""
    ordered = sorted(patches)
    await conn.execute(LOCK_TOOL_ROWS, ordered)
    await conn.execute(MIRROR_MANY, ordered, [patches[i] for i in ordered])


async def set_decisions(conn: asyncpg.Connection, decision_ids: dict[Key, int]) -> None:
    """Link components (by ``(user_id, id)``) to their carriers (where not linked yet)."""
    await conn.execute(SET_DECISIONS, [u for u, _ in decision_ids], [i for _, i in decision_ids],
                       list(decision_ids.values()))


async def audit_many(conn: asyncpg.Connection, rows: list[tuple[str, str]], *, from_status: str,
                     to_status: str, actor: str) -> None:
    """Audit one transition of several ``(user_id, component_id)`` (the sweep's hand-overs)."""
    await conn.execute(AUDIT_MANY, [u for u, _ in rows], [c for _, c in rows], from_status,
                       to_status, actor)
