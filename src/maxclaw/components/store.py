"""SQL for cards: component rows, the CAS transitions, the display mirror, the audit trail.

Every transition is one statement, ``TRANSITION``: ``UPDATE … WHERE user_id = $1 AND id = $2
AND status = ANY($3) RETURNING *`` with its mirror and audit row, the from-states coming from
``components/machine.py``. No row back means another surface got there first, and nothing was
written. The due sweep moves a batch set-wise (``SWEEP_MOVE``, ``MIRROR_MANY``, ``AUDIT_MANY``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime

import asyncpg

from maxclaw.components.rows import (
    ComponentInContext,
    ComponentRow,
    ComponentStatus,
    MovedComponent,
    NewComponent,
    SweptComponent,
)
from maxclaw.decisions.rows import NewCarrier

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
#   $1 user_id, $2 id, $3 from-states (the transitions table's), $4 to-state,
#   $5 set_answer: write $6..$8 into answer/answered_by/answered_via (NULLs clear them),
#   $9 a note for main_reason (NULL keeps it), $10 actor, $11 the audit's via,
#   $12 the statuses the card itself answers from (``answerable_here`` in the mirror),
#   $13 ``main_may_take`` in the mirror, $14/$15 why it was withdrawn and by which card
#   (NULL keeps them).
# The mirrored state is built from the updated row, so display.states cannot disagree with it;
# its seen_at (stamped by turns.store.STAMP_SEEN, as the wire writes instants) is kept unless
# this move cleared it (an answer, or a revoke reopening the card).
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
           due_at = NULL, updated_at = now()
      FROM prev
     WHERE c.user_id = $1::uuid AND c.id = $2 AND prev.status = ANY($3::text[])
    RETURNING {COMPONENT_COLUMNS}, prev.status AS from_status
), mirror AS (
    UPDATE messages m
       SET display = jsonb_set(m.display, ARRAY['states', upd.id], jsonb_build_object(
               'status', upd.status, 'answered_by', upd.answered_by,
               'answered_via', upd.answered_via, 'answer', upd.answer, 'due_at', upd.due_at,
               'expires_at', upd.expires_at,
               'answerable_here', upd.status = ANY($12::text[]), 'main_may_take', $13::bool,
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
# (``decisions.store.SETTLE``) and its notifications withdrawn (by ``push.store.WITHDRAW``'s
# rule), with the push hint. Every effect selects from ``upd``: a lost CAS writes nothing at
# all. Was six round trips (BEGIN, four statements, COMMIT).
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
           answered_at = now(), seen_at = NULL, due_at = NULL, updated_at = now()
      FROM prev
     WHERE c.user_id = $1::uuid AND c.id = $2 AND prev.status = ANY($3::text[])
       AND prev.version = (SELECT v.version FROM seen AS v)
    RETURNING {COMPONENT_COLUMNS}, prev.status AS from_status
), mirror AS (
    UPDATE messages m
       SET display = jsonb_set(m.display, ARRAY['states', upd.id], jsonb_build_object(
               'status', upd.status, 'answered_by', upd.answered_by,
               'answered_via', upd.answered_via, 'answer', upd.answer, 'due_at', upd.due_at,
               'expires_at', upd.expires_at,
               'answerable_here', upd.status = ANY($8::text[]), 'main_may_take', $9::bool,
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
    UPDATE push_outbox o
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
    SELECT d.user_id, d.id, settled.id, 'withdraw', $14, $13::jsonb
      FROM settled, shown AS l
      JOIN push_devices AS d ON d.user_id = $1::uuid AND d.id = l.device_id
     WHERE l.kind = 'notify'
    RETURNING id
)
SELECT upd.*,
       CASE WHEN EXISTS (SELECT 1 FROM queued)
                 AND current_setting('maxclaw.notify', true) IS DISTINCT FROM 'off'
            THEN pg_notify('maxclaw_push', '') END AS push_hint
  FROM upd
"""
ASK_TOOL_META = {"tool": {"name": "ask_user_question", "status": 200}}


@dataclass
class CardRows:
    """What posting one card writes (``ComponentService.card_rows``): its tool row's content
    and display, its component rows (without message ids and carrier), and the carriers to
    create with their push payloads (none when Max watches the thread)."""

    tool_call_id: str
    content: dict[str, object]
    display: dict[str, object]
    components: list[NewComponent]
    carriers: list[NewCarrier] = field(default_factory=list)


# An assistant row with the cards it asks for, as ONE statement (no BEGIN/COMMIT): the thread
# locked (FOR KEY SHARE, as an input's insert does) and, for a runtime that sent its turn_id,
# that turn still the thread's running one (locked FOR SHARE until this commits: the fencing
# of turns.store.current_running_turn); then the assistant row, each card's tool row (after
# it, in card order), the carriers (ON CONFLICT as decisions.store.INSERT_CARRIERS), one push
# per carrier and device with the push hint, and the component rows. Every write selects from
# the assistant row, so a missing thread or a stale turn writes nothing; a unique violation
# (a racing retry's tool row, a component id taken) fails the whole statement. Was BEGIN, six
# statements and COMMIT.
#   $1 user, $2 thread, $3 turn_id (NULL: not fenced), $4 body, $5 tool_calls, $6 source_meta,
#   $7 sensitive; per card: $8 tool_call_id, $9 content, $10 display (JSON text); per
#   component: $11 id, $12 its card's tool_call_id, $13 kind, $14 stakes, $15 sensitive,
#   $16 due_at, $17 expires_at; per carrier: $18 component id, $19 title, $20 body,
#   $21 options (JSON text), $22 allow_text, $23 sensitive, $24 bar, $25 push payload.
POST_CARDS = """
WITH thread AS (
    SELECT id FROM threads WHERE user_id = $1::uuid AND id = $2::uuid FOR KEY SHARE
), turn AS (
    SELECT id FROM turns
     WHERE user_id = $1::uuid AND thread_id = $2::uuid AND status = 'running'
       AND $3::bigint IS NOT NULL
       FOR SHARE
), asst AS (
    INSERT INTO messages (user_id, thread_id, role, body, tool_calls, source_meta, sensitive,
                          turn_id)
    SELECT $1::uuid, thread.id, 'assistant', $4, $5::jsonb, $6::jsonb, $7, $3 FROM thread
     WHERE $3::bigint IS NULL OR EXISTS (SELECT 1 FROM turn WHERE turn.id = $3)
    RETURNING id
), tools AS (
    INSERT INTO messages (user_id, thread_id, role, tool_call_id, content, display, source_meta,
                          turn_id)
    SELECT $1::uuid, $2::uuid, 'tool', x.call_id, x.content::jsonb, x.display::jsonb,
           '{"tool": {"name": "ask_user_question", "status": 200}}'::jsonb, $3
      FROM asst, unnest($8::text[], $9::text[], $10::text[]) WITH ORDINALITY
           AS x(call_id, content, display, n)
     ORDER BY x.n
    RETURNING id, tool_call_id
), carriers AS (
    INSERT INTO decisions (user_id, kind, dedupe_key, component_id, thread_id, title, body,
                           options, allow_text, sensitive, bar)
    SELECT $1::uuid, 'agent-question', 'ask:' || x.component_id, x.component_id, $2::uuid,
           x.title, x.body, x.options::jsonb, x.allow_text, x.sensitive, x.bar
      FROM asst, unnest($18::text[], $19::text[], $20::text[], $21::text[], $22::bool[],
                        $23::bool[], $24::bool[], $25::text[]) WITH ORDINALITY
           AS x(component_id, title, body, options, allow_text, sensitive, bar, payload, n)
     ORDER BY x.n
    ON CONFLICT (user_id, dedupe_key) DO NOTHING
    RETURNING id, component_id
), queued AS (
    INSERT INTO push_outbox (user_id, device_id, decision_id, kind, collapse_id, payload)
    SELECT d.user_id, d.id, c.id, 'notify', 'ask:' || c.component_id,
           jsonb_set(x.payload::jsonb, '{decision_id}', to_jsonb(c.id))
      FROM carriers c
      JOIN unnest($18::text[], $25::text[]) AS x(component_id, payload)
        ON x.component_id = c.component_id
      JOIN push_devices d ON d.user_id = $1::uuid
    RETURNING id
), components AS (
    INSERT INTO message_components (id, user_id, thread_id, message_id, tool_message_id, kind,
                                    stakes, sensitive, due_at, decision_id, expires_at)
    SELECT x.id, $1::uuid, $2::uuid, asst.id, tools.id, x.kind, x.stakes, x.sensitive,
           x.due_at,
           CASE WHEN x.id = ANY($18::text[]) THEN coalesce(
               (SELECT c.id FROM carriers c WHERE c.component_id = x.id),
               (SELECT d.id FROM decisions d
                 WHERE d.user_id = $1::uuid AND d.dedupe_key = 'ask:' || x.id)) END,
           x.expires_at
      FROM asst, unnest($11::text[], $12::text[], $13::text[], $14::text[], $15::bool[],
                        $16::timestamptz[], $17::timestamptz[])
           AS x(id, call_id, kind, stakes, sensitive, due_at, expires_at)
      JOIN tools ON tools.tool_call_id = x.call_id
)
SELECT (SELECT id FROM asst) AS id, EXISTS (SELECT 1 FROM thread) AS thread_found,
       (SELECT coalesce(jsonb_object_agg(tool_call_id, id), '{}'::jsonb) FROM tools) AS tool_ids,
       CASE WHEN EXISTS (SELECT 1 FROM queued)
                 AND current_setting('maxclaw.notify', true) IS DISTINCT FROM 'off'
            THEN pg_notify('maxclaw_push', '') END AS push_hint
"""


async def post_cards(conn: asyncpg.Connection, user_id: str, thread_id: str, *,
                     turn_id: int | None, body: str | None, tool_calls: object,
                     source_meta: object, sensitive: bool,
                     cards: list[CardRows]) -> tuple[int | None, bool, dict[str, int]]:
    """``POST_CARDS``: ``(assistant row id, thread found, {tool_call_id: tool row id})``; the
    id is None (and nothing was written) when the thread is gone or ``turn_id`` is not its
    running turn."""
    comps = [(c, r) for c in cards for r in c.components]
    carried = [r for c in cards for r in c.carriers]
    row = await conn.fetchrow(
        POST_CARDS, user_id, thread_id, turn_id, body, tool_calls, source_meta, sensitive,
        [c.tool_call_id for c in cards], [json.dumps(c.content) for c in cards],
        [json.dumps(c.display) for c in cards],
        [r.id for _, r in comps], [c.tool_call_id for c, _ in comps],
        [r.kind for _, r in comps], [r.stakes for _, r in comps],
        [r.sensitive for _, r in comps], [r.due_at for _, r in comps],
        [r.expires_at for _, r in comps],
        [r.component_id for r in carried], [r.title for r in carried],
        [r.body for r in carried], [json.dumps(r.options) for r in carried],
        [r.allow_text for r in carried], [r.sensitive for r in carried],
        [r.bar for r in carried], [json.dumps(r.payload) for r in carried])
    ids = {str(k): int(v) for k, v in (row["tool_ids"] or {}).items()}
    return (int(row["id"]) if row["id"] is not None else None), bool(row["thread_found"]), ids


SET_DECISION = """
UPDATE message_components SET decision_id = $3 WHERE user_id = $1::uuid AND id = $2
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
  JOIN messages m ON m.user_id = c.user_id AND m.id = c.message_id
  JOIN threads t ON t.user_id = c.user_id AND t.id = c.thread_id
 WHERE (c.user_id, c.id) IN (SELECT user_id, id FROM message_components
                 WHERE status = 'open' AND due_at IS NOT NULL AND due_at <= $1
                 ORDER BY due_at LIMIT $2 FOR UPDATE SKIP LOCKED)
   AND c.status = 'open'
 ORDER BY c.due_at
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


async def lock_tool_rows(conn: asyncpg.Connection, tool_rows: list[ToolRow]) -> None:
    """Lock tool rows (``(user_id, message id)``) in id order (before a set-wise move, as
    answers lock them)."""
    ordered = sorted(set(tool_rows), key=_by_message_id)
    await conn.execute(LOCK_TOOL_ROWS, [u for u, _ in ordered], [i for _, i in ordered])


async def status_of(conn: asyncpg.Connection, user_id: str, component_id: str) -> str | None:
    value = await conn.fetchval(STATUS_OF, user_id, component_id)
    return str(value) if value else None


async def insert_components(conn: asyncpg.Connection, rows: list[NewComponent]) -> None:
    """Insert a card's component rows in one statement (their message ids set)."""
    await conn.execute(
        INSERT_COMPONENTS, [r.id for r in rows], [r.user_id for r in rows],
        [r.thread_id for r in rows], [r.message_id for r in rows],
        [r.tool_message_id for r in rows], [r.kind for r in rows], [r.stakes for r in rows],
        [r.sensitive for r in rows], [r.due_at for r in rows], [r.decision_id for r in rows],
        [r.expires_at for r in rows])


async def transition(conn: asyncpg.Connection, user_id: str, component_id: str, *,
                     sources: list[str], target: str, actor: str, via: str | None,
                     answerable_here: list[str], main_may_take: bool = False,
                     set_answer: bool = False, answer: dict[str, object] | None = None,
                     answered_by: str | None = None, answered_via: str | None = None,
                     main_note: str | None = None, withdrawn_reason: str | None = None,
                     superseded_by: str | None = None,
                     token_id: int | None = None) -> MovedComponent | None:
    """One transition (``TRANSITION``): the CAS from ``sources`` to ``target``, the mirror and
    the audit row (naming ``token_id``, the API token that acted, if one did); None if the CAS
    lost (and then nothing was written). ``set_answer`` writes
    ``answer``/``answered_by``/``answered_via`` (all None: the answer is cleared)."""
    row = await conn.fetchrow(TRANSITION, user_id, component_id, sources, target, set_answer,
                              answer, answered_by, answered_via, main_note, actor, via,
                              answerable_here, main_may_take, withdrawn_reason, superseded_by,
                              token_id)
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


async def set_decision(conn: asyncpg.Connection, user_id: str, component_id: str,
                       decision_id: int) -> None:
    await conn.execute(SET_DECISION, user_id, component_id, decision_id)


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
   SET status = $3, due_at = NULL, updated_at = now()
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
ToolRow = tuple[str, int]  # (user_id, tool message id)


def _by_message_id(row: ToolRow) -> int:
    return row[1]


async def sweep_move(conn: asyncpg.Connection, to_main: list[Key], keep_open: list[Key], *,
                     to_main_target: str, keep_target: str,
                     sources: list[str]) -> dict[Key, SweptComponent]:
    """Move the claimed cards: ``to_main`` → ``to_main_target``, ``keep_open`` →
    ``keep_target`` without a due time, both only from ``sources``. Returns the new state of
    each card moved, by ``(user_id, id)``."""
    keys = to_main + keep_open
    rows = await conn.fetch(SWEEP_MOVE, [u for u, _ in keys], [i for _, i in keys],
                            [True] * len(to_main) + [False] * len(keep_open), to_main_target,
                            keep_target, sources)
    return {(r["user_id"], r["id"]): SweptComponent.from_record(r) for r in rows}


async def mirror_many(conn: asyncpg.Connection,
                      patches: dict[ToolRow, dict[str, dict[str, object]]]) -> None:
    """Patch ``display.states`` of several tool rows (``{(user_id, tool message id): {id:
    state}}``)."""
    ordered = sorted(patches, key=_by_message_id)
    users, ids = [u for u, _ in ordered], [i for _, i in ordered]
    await conn.execute(LOCK_TOOL_ROWS, users, ids)
    await conn.execute(MIRROR_MANY, users, ids, [patches[k] for k in ordered])


async def set_decisions(conn: asyncpg.Connection, decision_ids: dict[Key, int]) -> None:
    """Link components (by ``(user_id, id)``) to their carriers (where not linked yet)."""
    await conn.execute(SET_DECISIONS, [u for u, _ in decision_ids], [i for _, i in decision_ids],
                       list(decision_ids.values()))


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
# without a carrier ($4: the ``unwatched`` row's from-states)
UNWATCHED_MOVE = f"""
UPDATE message_components c
   SET due_at = x.due_at, updated_at = now()
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
                         sources: list[str]) -> dict[Key, ComponentRow]:
    """Give the claimed cards their new due times; returns the rows moved."""
    keys = list(due)
    rows = await conn.fetch(UNWATCHED_MOVE, [u for u, _ in keys], [i for _, i in keys],
                            [due[k] for k in keys], sources)
    return {(r["user_id"], r["id"]): ComponentRow.from_record(r) for r in rows}
