"""A prototype, for measurement only: the round trip with its statements merged.

Same rows, same rules, fewer round trips. Each write is ONE statement (data-modifying CTEs), so
it is atomic without BEGIN/COMMIT; each read is one statement:
- the assistant row: 1 statement (the thread check folded into the INSERT … SELECT);
- execute: 1 read (thread, stored result, the call, presence) + 1 write (tool row, carrier,
  push enqueue, component rows);
- answer: 1 read (the component with its call and thread) + 1 write (CAS, mirror, answer
  message, wake, settle, cancel pending pushes, withdraw, audit). When the CAS finds no row,
  every other part of the statement selects from the empty CAS and writes nothing.
5 round trips and 3 commits per round trip, against the service's 30 and 3. The semantic
subtleties are the lead's to judge (notably: the read is outside the write's transaction,
which is already the case for the status the current code reads before its CAS).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg

from bench.dataset import CARD_ARGS, CARD_OPTIONS
from maxclaw.cards.text import ASK_NOTE
from maxclaw.components import store as components

CALL_ARGS = CARD_ARGS
QUESTION = CARD_ARGS["questions"][0]["question"]
TITLE = CARD_ARGS["title"]
ANSWER_VALUE = {"selected": ["keep"], "text": None}
BODY = (f'Answer to "{TITLE}" (question card {{cid}} in a message above)\n'
        f"Question: {QUESTION}\nChose: Keep one version")
PUSH_ACTIONS = [{"id": "opt:keep", "title": "Keep one version"},
                {"id": "opt:drop", "title": "Remove it now"},
                {"id": "other", "title": "Other…", "input": True}]

POST_ASSISTANT = """
INSERT INTO messages (user_id, thread_id, role, body, tool_calls)
SELECT t.user_id, t.id, 'assistant', $3, $4::jsonb FROM threads t
 WHERE t.id = $2::uuid AND t.user_id = $1::uuid
RETURNING id
"""
EXECUTE_READ = """
SELECT t.id::text, t.kind, t.category, t.title,
       (SELECT r.id FROM messages r WHERE r.user_id = $1::uuid AND r.thread_id = t.id
           AND r.role = 'tool' AND r.tool_call_id = $3) AS done_id,
       (SELECT jsonb_build_object('message_id', a.id, 'turn_id', a.turn_id,
                                  'tool_calls', a.tool_calls)
          FROM messages a WHERE a.user_id = $1::uuid AND a.thread_id = t.id
           AND a.role = 'assistant' AND a.tool_calls @> $4::jsonb
         ORDER BY a.id DESC LIMIT 1) AS call,
       EXISTS (SELECT 1 FROM presence p WHERE p.user_id = $1::uuid AND p.thread_id = t.id
                  AND p.expires_at > now()) AS watching
  FROM threads t WHERE t.user_id = $1::uuid AND t.id = $2::uuid
"""
# $1 user, $2 thread, $3 call id, $4 component id, $5 tool content, $6 display,
# $7 assistant message id, $8 due_at, $9 title, $10 question, $11 options, $12 push payload
# (decision_id filled in here), $13 watching (no carrier)
POST_CARD = """
WITH tool AS (
    INSERT INTO messages (user_id, thread_id, role, tool_call_id, content, display, source_meta)
    VALUES ($1::uuid, $2::uuid, 'tool', $3, $5::jsonb, $6::jsonb,
            '{"tool": {"name": "ask_user_question", "status": 200}}'::jsonb)
    RETURNING id
), carrier AS (
    INSERT INTO decisions (user_id, kind, dedupe_key, component_id, thread_id, title, body,
                           options, allow_text, sensitive, bar)
    SELECT $1::uuid, 'agent-question', 'ask:' || $4, $4, $2::uuid, $9, $10, $11::jsonb, true,
           false, false
     WHERE NOT $13
    ON CONFLICT (user_id, dedupe_key) DO NOTHING
    RETURNING id
), queued AS (
    INSERT INTO push_outbox (user_id, device_id, decision_id, kind, collapse_id, payload)
    SELECT d.user_id, d.id, c.id, 'notify', 'ask:' || $4,
           jsonb_set($12::jsonb, '{decision_id}', to_jsonb(c.id))
      FROM carrier c, push_devices d WHERE d.user_id = $1::uuid
    RETURNING id
), component AS (
    INSERT INTO message_components (id, user_id, thread_id, message_id, tool_message_id, kind,
                                    stakes, sensitive, due_at, decision_id)
    SELECT $4, $1::uuid, $2::uuid, $7, tool.id, 'choice', 'normal', false, $8,
           (SELECT id FROM carrier)
      FROM tool
)
SELECT tool.id,
       CASE WHEN EXISTS (SELECT 1 FROM queued)
                 AND current_setting('maxclaw.notify', true) IS DISTINCT FROM 'off'
            THEN pg_notify('maxclaw_push', '') END AS hint
  FROM tool
"""
# $1 component, $2 user, $3 from statuses, $4 stored answer, $5 via, $6 body, $7 source_meta,
# $8 answer summary, $9 withdraw payload, $10 the status read before (for the audit)
ANSWER_SQL = """
WITH cas AS (
    UPDATE message_components
       SET status = 'answered', answer = $4::jsonb, answered_by = 'max', answered_via = $5,
           answered_at = now(), due_at = NULL, updated_at = now()
     WHERE id = $1 AND user_id = $2::uuid AND status = ANY($3::text[])
    RETURNING status, answered_by, answered_via, answer, due_at, decision_id, tool_message_id,
              thread_id
), mirror AS (
    UPDATE messages m
       SET display = jsonb_set(m.display, ARRAY['states', $1], jsonb_build_object(
           'status', cas.status, 'answered_by', cas.answered_by,
           'answered_via', cas.answered_via, 'answer', cas.answer, 'due_at', cas.due_at))
      FROM cas WHERE m.id = cas.tool_message_id AND m.user_id = $2::uuid
), message AS (
    INSERT INTO messages (user_id, thread_id, role, body, source_meta, sensitive)
    SELECT $2::uuid, cas.thread_id, 'user', $6, $7::jsonb, false FROM cas
), wake AS (
    INSERT INTO turns (user_id, thread_id) SELECT $2::uuid, cas.thread_id FROM cas
    ON CONFLICT (user_id, thread_id) WHERE status IN ('queued', 'running') DO NOTHING
), settle AS (
    UPDATE decisions d
       SET status = 'settled', answer_text = $8, settled_via = $5, settled_at = now()
      FROM cas WHERE d.id = cas.decision_id AND d.user_id = $2::uuid AND d.status = 'open'
    RETURNING d.id
), cancel AS (
    UPDATE push_outbox o
       SET status = 'dead', last_error = 'superseded: the decision was settled before delivery'
      FROM settle WHERE o.decision_id = settle.id AND o.user_id = $2::uuid
       AND o.kind = 'notify' AND o.status = 'pending'
), withdraw AS (
    INSERT INTO push_outbox (user_id, device_id, decision_id, kind, collapse_id, payload)
    SELECT d.user_id, d.id, settle.id, 'withdraw', 'ask:' || $1, $9::jsonb
      FROM settle, push_devices d WHERE d.user_id = $2::uuid
    RETURNING id
), audit AS (
    INSERT INTO component_audit (user_id, component_id, from_status, to_status, actor, via)
    SELECT $2::uuid, $1, $10, 'answered', 'max', $5 FROM cas
)
SELECT cas.status, cas.decision_id,
       CASE WHEN EXISTS (SELECT 1 FROM withdraw)
                 AND current_setting('maxclaw.notify', true) IS DISTINCT FROM 'off'
            THEN pg_notify('maxclaw_push', '') END AS hint
  FROM cas
"""


async def post(conn: asyncpg.Connection, user_id: str, thread_id: str,
               call_id: str) -> tuple[str, str]:
    """Post the card; returns what ``answer`` needs."""
    call = {"id": call_id, "name": "ask_user_question", "arguments": CALL_ARGS}
    if await conn.fetchval(POST_ASSISTANT, user_id, thread_id, None, [call]) is None:
        raise RuntimeError("no such thread")
    found = await conn.fetchrow(EXECUTE_READ, user_id, thread_id, call_id, [{"id": call_id}])
    cid = f"{call_id}:q1"
    due_at = datetime.now(UTC) + timedelta(minutes=30)
    due = due_at.isoformat()
    tool_id = await conn.fetchval(
        POST_CARD, user_id, thread_id, call_id, cid,
        {"posted": True, "note": ASK_NOTE,
         "components": [{"id": cid, "kind": "choice", "answer_due_at": due}]},
        {"v": 1, "kind": "components", "states": {cid: {
            "status": "open", "answered_by": None, "answered_via": None, "answer": None,
            "due_at": due}}},
        found["call"]["message_id"], due_at, TITLE, QUESTION, CARD_OPTIONS,
        {"kind": "agent-question", "decision_id": None, "component_id": cid,
         "thread_id": thread_id, "title": found["title"], "body": QUESTION,
         "actions": PUSH_ACTIONS, "reply": {"placeholder": "Reply…"},
         "collapse_id": f"ask:{cid}"},
        found["watching"])
    if tool_id is None:
        raise RuntimeError("the card was not posted")
    return user_id, cid


async def answer(conn: asyncpg.Connection, handle: tuple[str, str]) -> None:
    user_id, cid = handle
    row = await conn.fetchrow(components.GET_WITH_CONTEXT, user_id, cid)
    new = await conn.fetchrow(
        ANSWER_SQL, cid, user_id, ["open", "revoked", "handed-back"], ANSWER_VALUE, "card",
        BODY.format(cid=cid),
        {"componentAnswer": {"componentId": cid, "answeredBy": "max", "via": "card"}},
        "Keep one version", {"kind": "withdraw", "collapse_id": f"ask:{cid}"}, row["status"])
    if new is None:
        raise RuntimeError(f"the merged floor lost a CAS on {cid}: the benchmark is broken")

