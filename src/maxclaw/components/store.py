"""SQL for cards: component rows, the CAS transitions, the display mirror, the audit trail.

Every transition is one statement, ``TRANSITION``: ``UPDATE … WHERE user_id = $1 AND id = $2
AND status = ANY($3) RETURNING *`` with its mirror and audit row, the from-states coming from
``components/machine.py``. No row back means another surface got there first, and nothing was
written. Posting a card's statements are in ``post_store.py``, the sweeps' set-wise ones in
``sweep_store.py``.
"""

from __future__ import annotations

from datetime import datetime

import asyncpg

from maxclaw.components.rows import (
    ComponentInContext,
    ComponentStatus,
    MovedComponent,
)

COMPONENT_COLUMNS = (
    "c.id, c.user_id::text, c.thread_id::text, c.message_id, c.tool_message_id, c.kind,"
    " c.stakes, c.sensitive, c.status, c.answer, c.answered_by, c.answered_via, c.main_reason,"
    " c.due_at, c.decision_id, c.posted_at, c.answered_at, c.seen_at, c.expires_at,"
    " c.withdrawn_reason, c.superseded_by"
)
# the component with what its rules need: the call that defines it and its thread. The call
# and the thread are read as fenced LATERAL subqueries (``OFFSET 0``: never flattened into a
# join), so each is one lookup of its whole key from the component's row. As joins, a user the
# statistics put at one row let the planner read all of that user's messages and threads
# through the keys' user_id prefix and match afterwards (tests/integration/test_query_plans.py).
GET_WITH_CONTEXT = f"""
SELECT {COMPONENT_COLUMNS}, m.tool_calls, t.kind AS thread_kind, t.category, t.title AS thread_title
  FROM message_components c
 CROSS JOIN LATERAL (SELECT tool_calls FROM messages
                      WHERE user_id = c.user_id AND id = c.message_id OFFSET 0) AS m
 CROSS JOIN LATERAL (SELECT kind, category, title FROM threads
                      WHERE user_id = c.user_id AND id = c.thread_id OFFSET 0) AS t
 WHERE c.user_id = $1::uuid AND c.id = $2
"""
# A card's named components with their context, in id order; ``FOR UPDATE`` when a whole-card
# answer locks them all before its first CAS (the order every writer of several components of
# one card follows, so two of them never wait on each other in a cycle).
CARD_WITH_CONTEXT = f"""
SELECT {COMPONENT_COLUMNS}, m.tool_calls, t.kind AS thread_kind, t.category, t.title AS thread_title
  FROM message_components c
 CROSS JOIN LATERAL (SELECT tool_calls FROM messages
                      WHERE user_id = c.user_id AND id = c.message_id OFFSET 0) AS m
 CROSS JOIN LATERAL (SELECT kind, category, title FROM threads
                      WHERE user_id = c.user_id AND id = c.thread_id OFFSET 0) AS t
 WHERE c.user_id = $1::uuid AND c.id = ANY($2::text[])
 ORDER BY c.id
"""
# Any one component of a card, by its call id (only when a request named none that exists: it
# reads the user's components, not an index range, so it stays off the common path).
ANY_OF_CARD = f"""
SELECT {COMPONENT_COLUMNS}, m.tool_calls, t.kind AS thread_kind, t.category, t.title AS thread_title
  FROM message_components c
  JOIN messages m ON m.user_id = c.user_id AND m.id = c.message_id
  JOIN threads t ON t.user_id = c.user_id AND t.id = c.thread_id
 WHERE c.user_id = $1::uuid AND left(c.id, length($2) + 1) = $2 || ':'
   AND strpos(substr(c.id, length($2) + 2), ':') = 0
 LIMIT 1
"""
# only the unsettled ones: a settled component takes no answer, and locking it would make a
# retry wait on (and deadlock with) a model's delivery stamping its seen_at
LOCK_CARD = """
SELECT id, status FROM message_components
 WHERE user_id = $1::uuid AND id = ANY($2::text[]) AND status = ANY($3::text[])
 ORDER BY id FOR UPDATE
"""
STATUS_OF = "SELECT status FROM message_components WHERE user_id = $1::uuid AND id = $2"
# Every transition, in one statement: lock the row, CAS it, patch the mirror, append the audit
# row. prev's FOR UPDATE waits for a concurrent writer and then sees its committed status, so
# the CAS and the audit's from_status are judged on the latest state. The mirror and audit
# CTEs only touch rows when upd returned one: a lost CAS writes nothing.
#   $1 user_id, $2 id, $3 from-states (the transitions table's), $4 to-state,
#   $5 set_answer: write $6..$8 into answer/answered_by/answered_via (NULLs clear them),
#   $9 a note for main_reason (NULL keeps it), $10 actor, $11 the audit's via,
#   $12 the statuses the card itself answers from (``answerable_here`` in the mirror),
#   $13 ``main_may_take`` in the mirror, $14/$15 why it was withdrawn and by which card
#   (NULL keeps them), $16 the API token that acted, $17 ``main_due_at``: when Main's time to
#   decide is up for a move to with-main, NULL for every other move (it leaves with-main, or
#   was never there).
# The mirrored state is built from the updated row (every move clears due_at; expires_at is
# written as timefmt.rfc3339 writes it — UTC, a Z, microseconds only if any — where
# PostgreSQL's JSON would write +00:00, a second form of one instant), so display.states
# cannot disagree with it; its seen_at (stamped by turns.store.STAMP_SEEN, as the wire writes
# instants) is kept unless this move cleared it (an answer, or a revoke reopening the card).
TRANSITION = f"""
WITH prev AS (
    SELECT id, status FROM message_components WHERE user_id = $1::uuid AND id = $2 FOR UPDATE
), upd AS (
    UPDATE message_components c
       SET status = $4,
           answer = CASE WHEN $5 THEN $6::jsonb ELSE c.answer END,
           answered_by = CASE WHEN $5 THEN $7::text ELSE c.answered_by END,
           answered_via = CASE WHEN $5 THEN $8::text ELSE c.answered_via END,
           answered_at = CASE WHEN NOT $5 THEN c.answered_at
                              WHEN $6::jsonb IS NULL THEN NULL ELSE now() END,
           seen_at = CASE WHEN $5 THEN NULL ELSE c.seen_at END,
           main_reason = coalesce($9::text, c.main_reason),
           withdrawn_reason = coalesce($14::text, c.withdrawn_reason),
           superseded_by = coalesce($15::text, c.superseded_by),
           due_at = NULL, main_due_at = $17::timestamptz, updated_at = now()
      FROM prev
     WHERE c.user_id = $1::uuid AND c.id = $2 AND prev.status = ANY($3::text[])
    RETURNING {COMPONENT_COLUMNS}, prev.status AS from_status
), mirror AS (
    UPDATE messages m
       SET display = jsonb_set(m.display, ARRAY['states', upd.id], jsonb_build_object(
               'status', upd.status, 'answered_by', upd.answered_by,
               'answered_via', upd.answered_via, 'answer', upd.answer,
               'due_at', NULL,
               'expires_at', to_char(upd.expires_at AT TIME ZONE 'UTC',
                                     'YYYY-MM-DD"T"HH24:MI:SS')
                   || CASE WHEN extract(microseconds FROM upd.expires_at)::bigint
                                % 1000000 = 0 THEN ''
                           ELSE to_char(upd.expires_at AT TIME ZONE 'UTC', '.US') END
                   || 'Z',
               'answerable_here', upd.status = ANY($12::text[]),
               'main_may_take', $13::bool,
               'withdrawn_reason', upd.withdrawn_reason, 'superseded_by', upd.superseded_by,
               'seen_at', CASE WHEN upd.seen_at IS NULL THEN NULL
                               ELSE m.display #> ARRAY['states', upd.id, 'seen_at'] END))
      FROM upd
     WHERE m.user_id = $1::uuid AND m.id = (SELECT u.tool_message_id FROM upd AS u)
), audit AS (
    INSERT INTO component_audit (user_id, component_id, from_status, to_status, actor, via,
                                 token_id)
    SELECT upd.user_id::uuid, upd.id, upd.from_status, upd.status, $10, $11, $16 FROM upd
)
SELECT * FROM upd
"""
# Max's answer and everything it implies, as ONE statement (no BEGIN/COMMIT: a single statement
# is its own transaction, and it is atomic): the CAS, mirror and audit of ``TRANSITION``, then
# the transitions table's answer effects — the answer message and the thread's wake-up (the
# thread locked first, as ``timeline.store.INSERT_INPUT_AND_WAKE`` does), the carrier settled
# (``decisions.store.SETTLE``) and its notifications withdrawn (``push.store.WITHDRAW``'s
# rule, the same text with this statement's parameters: tests/unit/test_withdraw_rule.py),
# with the push hint. Every effect selects from ``upd``: a
# lost CAS writes nothing at all. It is an optimisation of ``effects.answer_message`` +
# ``effects.settle_carrier`` (one round trip instead of a transaction's six);
# tests/integration/test_effects_equivalence.py runs the same answers both ways and compares
# every row written.
# Lock order, as the transaction paths take it: the component (``prev``), the tool row
# (``mirror``), the thread and its turn (``thread``, ``wake``), the carrier (``settled``),
# then its push rows. PostgreSQL runs a CTE when another pulls its rows and the rest at the
# end, last-written first — which once took the tool row LAST, after the turn insert, and
# deadlocked with Main's answer to another question of the same card (it holds the tool row
# and then wakes the thread; tests/reliability/test_races.py). So each step names the one
# before it: ``(SELECT count(*) FROM x) >= 0`` is always true and makes ``x`` run first.
# Each row is found by its whole key, the CTE's value as a scalar subquery
# (``m.id = (SELECT u.tool_message_id FROM upd AS u)``), not by a join to the CTE: joined, the
# planner estimated one row either way and read every row of the user through the key's
# ``user_id`` prefix, then matched — the answer cost grew with the user's history (6 to 8 ms per
# answer for a user with a few thousand messages; tests/integration/test_query_plans.py).
# One snapshot serves the whole statement, and ``FOR UPDATE`` refreshes only the row it locks:
# when ``prev`` waited for a writer that moved the card (a hand-back, a revoke, the unwatched
# sweep), that writer's new notification is not in the snapshot, and the withdraw would miss
# it. So the CAS also requires the locked row to be the version the snapshot holds (``seen``,
# by xmin): a card moved after the snapshot was taken writes nothing, and the caller runs the
# statement again on a fresh one (every writer that queues a notification for a card moves the
# card's row in the same transaction). Found by tests/reliability/test_db_faults.py: "last row
# is notify for a settled decision".
# Used for plain answers (no secret to seal, no guard to run in the transaction); the others
# take the transaction path.
#   $1 user_id, $2 id, $3 from-states, $4 to-state, $5 stored answer, $6 actor, $7 via,
#   $8 statuses the card answers from, $9 main_may_take in the mirror, $10 the message body,
#   $11 its source_meta, $12 the carrier's answer_text, $13 the withdraw payload,
#   $14 its collapse_id.
ANSWER_SETTLE = f"""
WITH seen AS (
    SELECT xmin AS version FROM message_components WHERE user_id = $1::uuid AND id = $2
), prev AS (
    SELECT id, status, xmin AS version FROM message_components
     WHERE user_id = $1::uuid AND id = $2 FOR UPDATE
), upd AS (
    UPDATE message_components c
       SET status = $4, answer = $5::jsonb, answered_by = $6, answered_via = $7,
           answered_at = now(), seen_at = NULL, due_at = NULL, main_due_at = NULL,
           updated_at = now()
      FROM prev
     WHERE c.user_id = $1::uuid AND c.id = $2 AND prev.status = ANY($3::text[])
       AND prev.version = (SELECT v.version FROM seen AS v)
    RETURNING {COMPONENT_COLUMNS}, prev.status AS from_status
), mirror AS (
    UPDATE messages m
       SET display = jsonb_set(m.display, ARRAY['states', upd.id], jsonb_build_object(
               'status', upd.status, 'answered_by', upd.answered_by,
               'answered_via', upd.answered_via, 'answer', upd.answer,
               'due_at', NULL,
               'expires_at', to_char(upd.expires_at AT TIME ZONE 'UTC',
                                     'YYYY-MM-DD"T"HH24:MI:SS')
                   || CASE WHEN extract(microseconds FROM upd.expires_at)::bigint
                                % 1000000 = 0 THEN ''
                           ELSE to_char(upd.expires_at AT TIME ZONE 'UTC', '.US') END
                   || 'Z',
               'answerable_here', upd.status = ANY($8::text[]),
               'main_may_take', $9::bool,
               'withdrawn_reason', upd.withdrawn_reason, 'superseded_by', upd.superseded_by,
               'seen_at', NULL))
      FROM upd
     WHERE m.user_id = $1::uuid AND m.id = (SELECT u.tool_message_id FROM upd AS u)
    RETURNING m.id
), audit AS (
    INSERT INTO component_audit (user_id, component_id, from_status, to_status, actor, via,
                                 token_id)
    SELECT upd.user_id::uuid, upd.id, upd.from_status, upd.status, $6, $7, $15 FROM upd
), thread AS (
    SELECT t.id FROM threads t
     WHERE t.user_id = $1::uuid AND t.id = (SELECT u.thread_id::uuid FROM upd AS u)
       AND (SELECT count(*) FROM mirror) >= 0 FOR KEY SHARE OF t
), msg AS (
    INSERT INTO messages (user_id, thread_id, role, body, source_meta, sensitive)
    SELECT $1::uuid, thread.id, 'user', $10, $11::jsonb, false FROM thread
    RETURNING thread_id
), wake AS (
    INSERT INTO turns (user_id, thread_id) SELECT $1::uuid, msg.thread_id FROM msg
    ON CONFLICT (user_id, thread_id) WHERE status IN ('queued', 'running') DO NOTHING
    RETURNING thread_id
), settled AS (
    UPDATE decisions d
       SET status = 'settled', answer_text = $12, settled_via = $7, settled_at = now()
     WHERE d.user_id = $1::uuid AND d.id = (SELECT u.decision_id FROM upd AS u)
       AND d.status = 'open' AND (SELECT count(*) FROM wake) >= 0
    RETURNING d.id
), cancelled AS (
    UPDATE push_outbox AS o
       SET status = 'dead', last_error = 'superseded: the decision was settled before delivery'
     WHERE o.user_id = $1::uuid AND o.decision_id = (SELECT s.id FROM settled AS s)
       AND o.kind = 'notify' AND o.status = 'pending'
    RETURNING o.id, o.attempts
), shown AS (
    SELECT DISTINCT ON (o.device_id) o.device_id, o.kind
      FROM push_outbox AS o
     WHERE o.user_id = $1::uuid AND o.decision_id = (SELECT s.id FROM settled AS s)
       AND NOT (o.kind = 'notify' AND o.status = 'dead'
                AND (o.attempts = 0 OR coalesce(o.last_error, '') NOT LIKE 'superseded%'))
       AND NOT EXISTS (SELECT 1 FROM cancelled AS c WHERE c.id = o.id AND c.attempts = 0)
     ORDER BY o.device_id DESC, o.id DESC
), queued AS (
    INSERT INTO push_outbox (user_id, device_id, decision_id, kind, collapse_id, payload)
    SELECT d.user_id, d.id, (SELECT s.id FROM settled AS s), 'withdraw', $14, $13::jsonb
      FROM shown AS l JOIN push_devices AS d ON d.user_id = $1::uuid AND d.id = l.device_id
     WHERE l.kind = 'notify'
    RETURNING id
)
SELECT upd.*,
       CASE WHEN EXISTS (SELECT 1 FROM queued)
                 AND current_setting('maxclaw.notify', true) IS DISTINCT FROM 'off'
            THEN pg_notify('maxclaw_push', '') END AS push_hint
  FROM upd
"""
THREAD_COMPONENTS = """
SELECT id FROM message_components
 WHERE user_id = $1::uuid AND thread_id = $2::uuid AND status = ANY($3::text[])
 ORDER BY posted_at, id
"""


async def get_with_context(conn: asyncpg.Connection, user_id: str,
                           component_id: str) -> ComponentInContext | None:
    """A component with its defining tool calls and its thread's kind, category and title."""
    row = await conn.fetchrow(GET_WITH_CONTEXT, user_id, component_id)
    return ComponentInContext.from_record(row) if row else None


async def card_with_context(conn: asyncpg.Connection, user_id: str,
                            component_ids: list[str]) -> list[ComponentInContext]:
    """Those of ``component_ids`` that exist, with their context, in id order."""
    return [ComponentInContext.from_record(r)
            for r in await conn.fetch(CARD_WITH_CONTEXT, user_id, component_ids)]


async def any_of_card(conn: asyncpg.Connection, user_id: str,
                      tool_call_id: str) -> list[ComponentInContext]:
    """One component of the card ``tool_call_id`` (with context), or none."""
    return [ComponentInContext.from_record(r)
            for r in await conn.fetch(ANY_OF_CARD, user_id, tool_call_id)]


async def lock_card(conn: asyncpg.Connection, user_id: str, component_ids: list[str],
                    unsettled: list[str]) -> dict[str, str]:
    """Lock those of the components that are ``unsettled``, in id order; their statuses."""
    return {r["id"]: r["status"]
            for r in await conn.fetch(LOCK_CARD, user_id, component_ids, unsettled)}


async def status_of(conn: asyncpg.Connection, user_id: str, component_id: str) -> str | None:
    value = await conn.fetchval(STATUS_OF, user_id, component_id)
    return str(value) if value else None


async def transition(conn: asyncpg.Connection, user_id: str, component_id: str, *,
                     sources: list[str], target: str, actor: str, via: str | None,
                     answerable_here: list[str], main_may_take: bool = False,
                     set_answer: bool = False, answer: dict[str, object] | None = None,
                     answered_by: str | None = None, answered_via: str | None = None,
                     main_note: str | None = None, withdrawn_reason: str | None = None,
                     superseded_by: str | None = None, token_id: int | None = None,
                     main_due_at: datetime | None = None) -> MovedComponent | None:
    """One transition (``TRANSITION``): the CAS from ``sources`` to ``target``, the mirror and
    the audit row (naming ``token_id``, the API token that acted, if one did); None if the CAS
    lost (and then nothing was written). ``set_answer`` writes
    ``answer``/``answered_by``/``answered_via`` (all None: the answer is cleared);
    ``main_due_at`` is written as given (None clears it: only a move to with-main sets it)."""
    row = await conn.fetchrow(TRANSITION, user_id, component_id, sources, target, set_answer,
                              answer, answered_by, answered_via, main_note, actor, via,
                              answerable_here, main_may_take, withdrawn_reason, superseded_by,
                              token_id, main_due_at)
    return MovedComponent.from_record(row) if row else None


async def answer_settle(conn: asyncpg.Connection, user_id: str, component_id: str, *,
                        sources: list[str], target: str, answer: dict[str, object],
                        actor: str, via: str, answerable_here: list[str], main_may_take: bool,
                        body: str, source_meta: dict[str, object], answer_text: str,
                        withdraw_payload: dict[str, object], collapse_id: str,
                        token_id: int | None = None) -> MovedComponent | None:
    """A plain answer with all its effects (``ANSWER_SETTLE``), one statement; call it on an
    autocommit connection (or inside a transaction). None if the CAS lost — or if the card was
    moved after the statement's snapshot, which a new statement would see — and then nothing
    was written."""
    row = await conn.fetchrow(ANSWER_SETTLE, user_id, component_id, sources, target, answer,
                              actor, via, answerable_here, main_may_take, body, source_meta,
                              answer_text, withdraw_payload, collapse_id, token_id)
    # push_hint only carries the NOTIFY (its value is always NULL): not a column of the row
    return MovedComponent.from_record(row, skip=("push_hint",)) if row else None


THREAD_CARD = """
SELECT id, status FROM message_components
 WHERE user_id = $1::uuid AND thread_id = $2::uuid AND left(id, length($3) + 1) = $3 || ':'
   AND strpos(substr(id, length($3) + 2), ':') = 0
 ORDER BY id
"""


async def card_components(conn: asyncpg.Connection, user_id: str, thread_id: str,
                          tool_call_id: str) -> list[ComponentStatus]:
    """The ``(id, status)`` of a card's components in one thread."""
    return [ComponentStatus.from_record(r)
            for r in await conn.fetch(THREAD_CARD, user_id, thread_id, tool_call_id)]


async def thread_components(conn: asyncpg.Connection, user_id: str, thread_id: str,
                            statuses: list[str]) -> list[str]:
    return [r["id"] for r in await conn.fetch(THREAD_COMPONENTS, user_id, thread_id, statuses)]


SET_DECISIONS = """
UPDATE message_components c SET decision_id = x.decision_id
  FROM unnest($1::uuid[], $2::text[], $3::bigint[]) AS x(user_id, id, decision_id)
 WHERE c.user_id = x.user_id AND c.id = x.id AND c.decision_id IS NULL
"""


Key = tuple[str, str]  # (user_id, component id)
ToolRow = tuple[str, int]  # (user_id, tool message id)


async def set_decisions(conn: asyncpg.Connection, decision_ids: dict[Key, int]) -> None:
    """Link components (by ``(user_id, id)``) to their carriers (where not linked yet)."""
    await conn.execute(SET_DECISIONS, [u for u, _ in decision_ids], [i for _, i in decision_ids],
                       list(decision_ids.values()))
