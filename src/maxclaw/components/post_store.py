"""SQL for posting cards: the component rows of a card, and an assistant row with its cards
as one statement (``POST_CARDS``). The moves of a posted card are in ``store.py``."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import asyncpg

from maxclaw.components.rows import NewComponent
from maxclaw.decisions.rows import NewCarrier
from maxclaw.prefs.rows import PrefsRow, of_json

INSERT_COMPONENTS = """
INSERT INTO message_components (id, user_id, thread_id, message_id, tool_message_id, kind, stakes,
                                sensitive, due_at, decision_id, expires_at, due_from)
SELECT * FROM unnest($1::text[], $2::uuid[], $3::uuid[], $4::bigint[], $5::bigint[], $6::text[],
                     $7::text[], $8::bool[], $9::timestamptz[], $10::bigint[], $11::timestamptz[],
                     $12::timestamptz[])
"""

ASK_TOOL_META = {"tool": {"name": "ask_user_question", "status": 200}}

# What posting a card reads of its user, in one statement: whether a live client has the
# thread in focus (presence.store.IS_WATCHING's test) and his settings (the due clock's
# minutes and quiet hours; issue 29)
POSTING_FACTS = """
SELECT EXISTS (SELECT 1 FROM presence
                WHERE user_id = $1::uuid AND thread_id = $2::uuid AND expires_at > $3)
         AS watching,
       (SELECT to_jsonb(u) FROM user_settings u WHERE u.user_id = $1::uuid) AS prefs
"""


async def posting_facts(conn: asyncpg.Connection, user_id: str, thread_id: str,
                        now: datetime) -> tuple[bool, PrefsRow]:
    """``(watching, his settings)`` for a card about to be posted in ``thread_id``."""
    row = await conn.fetchrow(POSTING_FACTS, user_id, thread_id, now)
    return bool(row["watching"]), of_json(user_id, row["prefs"])


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
# (a racing retry's tool row, a component id taken) fails the whole statement, so a post
# is one round trip and one commit.
#   $1 user, $2 thread, $3 turn_id (NULL: not fenced), $4 body, $5 tool_calls, $6 source_meta,
#   $7 sensitive; $8 the cards, $9 their components, $10 the carriers, each a JSON array of
#   objects (``post_cards`` spells their fields); $11 where the components' due clocks start
#   (the service's now; quiet hours, issue 29).
# Why JSON arrays read by jsonb_to_recordset rather than one array per column (unnest): the
# planner knows an unnest's length from a known array, so every call got a custom plan
# costed for its one card (20 against the generic plan's 110) and was planned again, 0.3-0.4
# ms of the backend's CPU per post (docs/benchmarks.md). jsonb_to_recordset's rows are
# estimated alike whatever its argument, so after five calls the prepared statement keeps the
# generic plan, planned once per connection.
POST_CARDS = """
WITH thread AS (
    SELECT id FROM threads WHERE user_id = $1::uuid AND id = $2::uuid FOR KEY SHARE
), turn AS (
    SELECT id FROM turns
     WHERE user_id = $1::uuid AND thread_id = $2::uuid AND status = 'running'
       AND $3::bigint IS NOT NULL
       FOR SHARE
), carried AS (
    SELECT * FROM jsonb_to_recordset($10::jsonb)
        AS x(n int, component_id text, title text, body text, options jsonb, allow_text bool,
             sensitive bool, bar bool, payload jsonb)
), asst AS (
    INSERT INTO messages (user_id, thread_id, role, body, tool_calls, source_meta, sensitive,
                          turn_id)
    SELECT $1::uuid, thread.id, 'assistant', $4, $5::jsonb, $6::jsonb, $7, $3 FROM thread
     WHERE $3::bigint IS NULL OR EXISTS (SELECT 1 FROM turn WHERE turn.id = $3)
    RETURNING id
), tools AS (
    INSERT INTO messages (user_id, thread_id, role, tool_call_id, content, display, source_meta,
                          turn_id)
    SELECT $1::uuid, $2::uuid, 'tool', x.call_id, x.content, x.display,
           '{"tool": {"name": "ask_user_question", "status": 200}}'::jsonb, $3
      FROM asst, jsonb_to_recordset($8::jsonb) AS x(n int, call_id text, content jsonb,
                                                    display jsonb)
     ORDER BY x.n
    RETURNING id, tool_call_id
), carriers AS (
    INSERT INTO decisions (user_id, kind, dedupe_key, component_id, thread_id, title, body,
                           options, allow_text, sensitive, bar)
    SELECT $1::uuid, 'agent-question', 'ask:' || x.component_id, x.component_id, $2::uuid,
           x.title, x.body, x.options, x.allow_text, x.sensitive, x.bar
      FROM asst, carried AS x
     ORDER BY x.n
    ON CONFLICT (user_id, dedupe_key) DO NOTHING
    RETURNING id, component_id
), queued AS (
    INSERT INTO push_outbox (user_id, device_id, decision_id, kind, collapse_id, payload)
    SELECT d.user_id, d.id, c.id, 'notify', 'ask:' || c.component_id,
           jsonb_set(x.payload, '{decision_id}', to_jsonb(c.id))
      FROM carriers c
      JOIN carried AS x ON x.component_id = c.component_id
      JOIN push_devices d ON d.user_id = $1::uuid
    RETURNING id
), components AS (
    INSERT INTO message_components (id, user_id, thread_id, message_id, tool_message_id, kind,
                                    stakes, sensitive, due_at, decision_id, expires_at,
                                    due_from)
    SELECT x.id, $1::uuid, $2::uuid, asst.id, tools.id, x.kind, x.stakes, x.sensitive,
           x.due_at,
           CASE WHEN EXISTS (SELECT 1 FROM carried k WHERE k.component_id = x.id) THEN coalesce(
               (SELECT c.id FROM carriers c WHERE c.component_id = x.id),
               (SELECT d.id FROM decisions d
                 WHERE d.user_id = $1::uuid AND d.dedupe_key = 'ask:' || x.id)) END,
           x.expires_at, $11::timestamptz
      FROM asst, jsonb_to_recordset($9::jsonb)
           AS x(id text, call_id text, kind text, stakes text, sensitive bool,
                due_at timestamptz, expires_at timestamptz)
      JOIN tools ON tools.tool_call_id = x.call_id
)
SELECT (SELECT id FROM asst) AS id, EXISTS (SELECT 1 FROM thread) AS thread_found,
       (SELECT coalesce(jsonb_object_agg(tool_call_id, id), '{}'::jsonb) FROM tools) AS tool_ids,
       CASE WHEN EXISTS (SELECT 1 FROM queued)
                 AND current_setting('maxclaw.notify', true) IS DISTINCT FROM 'off'
            THEN pg_notify('maxclaw_push', '') END AS push_hint
"""


def _when(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


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
        [{"n": n, "call_id": c.tool_call_id, "content": c.content, "display": c.display}
         for n, c in enumerate(cards)],
        [{"id": r.id, "call_id": c.tool_call_id, "kind": r.kind, "stakes": r.stakes,
          "sensitive": r.sensitive, "due_at": _when(r.due_at),
          "expires_at": _when(r.expires_at)} for c, r in comps],
        [{"n": n, "component_id": r.component_id, "title": r.title, "body": r.body,
          "options": r.options, "allow_text": r.allow_text, "sensitive": r.sensitive,
          "bar": r.bar, "payload": r.payload} for n, r in enumerate(carried)],
        next((r.due_from for _, r in comps), None))
    ids = {str(k): int(v) for k, v in (row["tool_ids"] or {}).items()}
    return (int(row["id"]) if row["id"] is not None else None), bool(row["thread_found"]), ids


async def insert_components(conn: asyncpg.Connection, rows: list[NewComponent]) -> None:
    """Insert a card's component rows in one statement (their message ids set)."""
    await conn.execute(
        INSERT_COMPONENTS, [r.id for r in rows], [r.user_id for r in rows],
        [r.thread_id for r in rows], [r.message_id for r in rows],
        [r.tool_message_id for r in rows], [r.kind for r in rows], [r.stakes for r in rows],
        [r.sensitive for r in rows], [r.due_at for r in rows], [r.decision_id for r in rows],
        [r.expires_at for r in rows], [r.due_from for r in rows])
