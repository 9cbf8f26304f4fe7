"""A prototype, for measurement only: the due sweep's hand-over done set-wise per batch.

``ComponentService.sweep_due`` runs about 8 statements per card (CAS, mirror, carrier insert
and lookup, Main's thread id, the hand-off message, the wake, the audit), so a 500-card batch
is ~4,000 round trips in one transaction. The same writes, set-wise, are 9 statements per batch
whatever its size: claim; CAS all; lock the tool rows in id order; mirror all (one UPDATE,
states merged per tool row);
carriers for cards without one (insert, push, link); Main threads; hand-off messages; wakes;
audit.

It covers what the benchmark's due cards exercise — cards Main may take — and refuses a batch
holding a card Main may not take (the service keeps those open with a carrier); the lead
decides what to adopt. The rows it writes
match the service's (checked by ``bench.sweep`` as for the service).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import asyncpg

from maxclaw.cards.definitions import ComponentDefinition, components_of_tool_call
from maxclaw.cards.rules import main_may_take
from maxclaw.cards.text import handoff_text
from maxclaw.components import store as components_store
from maxclaw.db.database import connect
from maxclaw.push.payload import build_payload

CAS_ALL = """
UPDATE message_components SET status = 'with-main', due_at = NULL, updated_at = now()
 WHERE id = ANY($1::text[]) AND status = 'open'
RETURNING id, status, answered_by, answered_via, answer, due_at, decision_id
"""
# Tool rows are locked in id order before they are written, the order the service's sweep and
# answers use (13829a2), so two sweepers, or a sweeper and an answer, never wait in a cycle.
LOCK_TOOL_ROWS = """
SELECT id FROM messages WHERE id = ANY($1::bigint[]) ORDER BY id FOR UPDATE
"""
MIRROR_ALL = """
UPDATE messages m SET display = jsonb_set(m.display, '{states}', (m.display -> 'states') || u.patch)
  FROM unnest($1::bigint[], $2::jsonb[]) AS u(id, patch)
 WHERE m.id = u.id AND m.user_id = ANY($3::uuid[])
"""
CARRIERS_MISSING = """
INSERT INTO decisions (user_id, kind, dedupe_key, component_id, thread_id, title, body, options,
                       allow_text, sensitive, bar)
SELECT u, 'agent-question', 'ask:' || c, c, t, ti, b, o, a, false, false
  FROM unnest($1::uuid[], $2::text[], $3::uuid[], $4::text[], $5::text[], $6::jsonb[],
              $7::bool[]) AS x(u, c, t, ti, b, o, a)
ON CONFLICT (user_id, dedupe_key) DO NOTHING
RETURNING id, user_id::text, kind, status, component_id, thread_id::text, title, body, options,
          allow_text, sensitive
"""
ENQUEUE_MANY = """
INSERT INTO push_outbox (user_id, device_id, decision_id, kind, collapse_id, payload)
SELECT d.user_id, d.id, x.dec, 'notify', x.col, x.p
  FROM unnest($1::uuid[], $2::bigint[], $3::text[], $4::jsonb[]) AS x(u, dec, col, p)
  JOIN push_devices d ON d.user_id = x.u
"""
SET_DECISIONS = """
UPDATE message_components c SET decision_id = d.id
  FROM decisions d
 WHERE c.id = ANY($1::text[]) AND c.decision_id IS NULL AND d.dedupe_key = 'ask:' || c.id
"""
MAIN_THREADS = """
SELECT user_id::text, id::text FROM threads WHERE kind = 'main' AND user_id = ANY($1::uuid[])
"""
HANDOFFS = """
INSERT INTO messages (user_id, thread_id, role, body, source_meta)
SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::jsonb[])
"""
WAKES = """
INSERT INTO turns (user_id, thread_id)
SELECT DISTINCT u, t FROM unnest($1::uuid[], $2::uuid[]) AS x(u, t)
ON CONFLICT (thread_id) WHERE status IN ('queued', 'running') DO NOTHING
"""
AUDITS = """
INSERT INTO component_audit (user_id, component_id, from_status, to_status, actor)
SELECT u, c, 'open', 'with-main', 'sweeper' FROM unnest($1::uuid[], $2::text[]) AS x(u, c)
"""


def _state(row: dict[str, Any]) -> dict[str, Any]:
    return {"status": row["status"], "answered_by": row["answered_by"],
            "answered_via": row["answered_via"], "answer": row["answer"], "due_at": None}


def _options(d: ComponentDefinition) -> list[dict[str, Any]]:
    if d.kind == "object":
        return [{"id": a.id, "label": a.label, "recommended": False} for a in d.actions]
    return [o.model_dump() for o in d.options]


async def sweep_batch(conn: asyncpg.Connection, limit: int = 500) -> int:
    """One batch, set-wise, in one transaction; returns how many cards went to Main."""
    async with conn.transaction():
        claimed = [dict(r) for r in
                   await conn.fetch(components_store.CLAIM_DUE, datetime.now(UTC), limit)]
        takeable = []
        for row in claimed:
            card = components_of_tool_call(next(
                c for c in row["tool_calls"] if c["id"] == row["id"].rsplit(":", 1)[0]))
            thread = {"kind": row["thread_kind"], "category": row["category"]}
            if not main_may_take(card, thread):
                raise NotImplementedError("the prototype only hands over cards Main may take")
            takeable.append((row, card.component(row["id"])))
        if not takeable:
            return 0
        moved = {r["id"]: r for r in
                 await conn.fetch(CAS_ALL, [row["id"] for row, _ in takeable])}
        takeable = [(row, d) for row, d in takeable if row["id"] in moved]
        users = sorted({row["user_id"] for row, _ in takeable})
        patches: dict[int, dict[str, Any]] = {}
        for row, _ in takeable:
            patches.setdefault(row["tool_message_id"], {})[row["id"]] = _state(
                dict(moved[row["id"]]))
        patches = dict(sorted(patches.items()))
        await conn.execute(LOCK_TOOL_ROWS, list(patches))
        await conn.execute(MIRROR_ALL, list(patches), list(patches.values()), users)
        missing = [(row, d) for row, d in takeable if moved[row["id"]]["decision_id"] is None]
        if missing:
            created = [dict(r) for r in await conn.fetch(CARRIERS_MISSING, *map(list, zip(*[
                (row["user_id"], d.id, row["thread_id"], d.title, d.question,
                 json.dumps(_options(d)), d.kind in ("text", "secret") or d.allow_other)
                for row, d in missing], strict=True)))]
            if created:  # a new carrier pushes, as ensure_carrier's does
                titles = {row["id"]: row["thread_title"] for row, _ in missing}
                payloads = [build_payload(c, titles[c["component_id"]]) for c in created]
                await conn.execute(ENQUEUE_MANY, [c["user_id"] for c in created],
                                   [c["id"] for c in created],
                                   [p["collapse_id"] for p in payloads], payloads)
            await conn.execute(SET_DECISIONS, [row["id"] for row, _ in missing])
        mains = dict(await conn.fetch(MAIN_THREADS, users))
        handoffs = [(row["user_id"], mains[row["user_id"]], "user",
                     handoff_text(d, row["thread_title"], row["thread_id"]),
                     {"askHandoff": {"componentId": row["id"], "threadId": row["thread_id"],
                                     "phase": "with-main"}})
                    for row, d in takeable]
        await conn.execute(HANDOFFS, *map(list, zip(*handoffs, strict=True)))
        await conn.execute(WAKES, [h[0] for h in handoffs], [h[1] for h in handoffs])
        await conn.execute(AUDITS, [row["user_id"] for row, _ in takeable],
                           [row["id"] for row, _ in takeable])
    return len(takeable)


async def sweep_all(url: str, limit: int = 500) -> dict[str, int]:
    """Batches until a batch comes back short (like ``sweep_due_all``)."""
    conn = await connect(url)
    total = 0
    try:
        while True:
            n = await sweep_batch(conn, limit)
            total += n
            if n < limit:
                return {"handed_to_main": total, "kept_open": 0}
    finally:
        await conn.close()
