"""SQL for the decisions queue (carriers of cards to the panel, push and the nudge bar)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import asyncpg

DECISION_COLUMNS = (
    "id, user_id::text, kind, status, dedupe_key, component_id, thread_id::text, title, body,"
    " options, allow_text, sensitive, answer_text, settled_via, bar, bar_snoozed_until,"
    " created_at, settled_at, rev"
)
INSERT_CARRIER = f"""
INSERT INTO decisions (user_id, kind, dedupe_key, component_id, thread_id, title, body, options,
                       allow_text, sensitive, bar)
VALUES ($1::uuid, 'agent-question', $2, $3, $4::uuid, $5, $6, $7::jsonb, $8, $9, $10)
ON CONFLICT (user_id, dedupe_key) DO NOTHING
RETURNING {DECISION_COLUMNS}
"""
INSERT_CARRIERS = f"""
INSERT INTO decisions (user_id, kind, dedupe_key, component_id, thread_id, title, body, options,
                       allow_text, sensitive, bar)
SELECT x.user_id, 'agent-question', 'ask:' || x.component_id, x.component_id, x.thread_id,
       x.title, x.body, x.options::jsonb, x.allow_text, x.sensitive, x.bar
  FROM unnest($1::uuid[], $2::text[], $3::uuid[], $4::text[], $5::text[], $6::text[],
              $7::bool[], $8::bool[], $9::bool[])
       AS x(user_id, component_id, thread_id, title, body, options, allow_text, sensitive, bar)
ON CONFLICT (user_id, dedupe_key) DO NOTHING
RETURNING {DECISION_COLUMNS}
"""
# keys are unique per user only: every lookup names the user
IDS_BY_DEDUPE = """
SELECT d.user_id::text, d.component_id, d.id
  FROM decisions d JOIN unnest($1::uuid[], $2::text[]) AS x(user_id, dedupe_key)
    ON d.user_id = x.user_id AND d.dedupe_key = x.dedupe_key
"""
BY_DEDUPE = f"SELECT {DECISION_COLUMNS} FROM decisions WHERE dedupe_key = $1 AND user_id = $2::uuid"
GET = f"SELECT {DECISION_COLUMNS} FROM decisions WHERE id = $1 AND user_id = $2::uuid"
LIST_OPEN = f"""
SELECT {DECISION_COLUMNS} FROM decisions
 WHERE user_id = $1::uuid AND status = 'open' ORDER BY id DESC LIMIT $2
"""
LIST_ALL = f"""
SELECT {DECISION_COLUMNS} FROM decisions WHERE user_id = $1::uuid ORDER BY id DESC LIMIT $2
"""
SETTLE = f"""
UPDATE decisions SET status = 'settled', answer_text = $3, settled_via = $4, settled_at = now()
 WHERE id = $1 AND user_id = $2::uuid AND status = 'open'
RETURNING {DECISION_COLUMNS}
"""
REOPEN = f"""
UPDATE decisions SET status = 'open', answer_text = NULL, settled_via = NULL, settled_at = NULL
 WHERE id = $1 AND user_id = $2::uuid AND status = 'settled'
RETURNING {DECISION_COLUMNS}
"""
SNOOZE = f"""
UPDATE decisions SET bar_snoozed_until = $3 WHERE id = $1 AND user_id = $2::uuid
RETURNING {DECISION_COLUMNS}
"""


async def insert_carrier(conn: asyncpg.Connection, user_id: str, *, component_id: str,
                         thread_id: str, title: str, body: str, options: list[dict[str, Any]],
                         allow_text: bool, sensitive: bool, bar: bool) -> dict[str, Any] | None:
    """Create the ``agent-question`` decision for a component; None if it already exists."""
    row = await conn.fetchrow(INSERT_CARRIER, user_id, f"ask:{component_id}", component_id,
                              thread_id, title, body, options, allow_text, sensitive, bar)
    return dict(row) if row else None


async def by_dedupe(conn: asyncpg.Connection, user_id: str, key: str) -> dict[str, Any] | None:
    row = await conn.fetchrow(BY_DEDUPE, key, user_id)
    return dict(row) if row else None


async def get(conn: asyncpg.Connection, user_id: str, decision_id: int) -> dict[str, Any] | None:
    row = await conn.fetchrow(GET, decision_id, user_id)
    return dict(row) if row else None


async def list_decisions(conn: asyncpg.Connection, user_id: str, status: str,
                         limit: int) -> list[dict[str, Any]]:
    """Newest first; ``status`` is 'open' or 'all'."""
    query = LIST_OPEN if status == "open" else LIST_ALL
    return [dict(r) for r in await conn.fetch(query, user_id, limit)]


async def settle(conn: asyncpg.Connection, user_id: str, decision_id: int, answer_text: str,
                 via: str) -> dict[str, Any] | None:
    """open → settled; None if it was settled already."""
    row = await conn.fetchrow(SETTLE, decision_id, user_id, answer_text, via)
    return dict(row) if row else None


async def reopen(conn: asyncpg.Connection, user_id: str, decision_id: int) -> dict[str, Any] | None:
    """settled → open (the agent-question reverter); None if it was open."""
    row = await conn.fetchrow(REOPEN, decision_id, user_id)
    return dict(row) if row else None


async def snooze(conn: asyncpg.Connection, user_id: str, decision_id: int,
                 until: datetime) -> dict[str, Any] | None:
    row = await conn.fetchrow(SNOOZE, decision_id, user_id, until)
    return dict(row) if row else None


async def insert_carriers(conn: asyncpg.Connection,
                          rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Create several components' decisions in one statement; returns the ones created."""
    cols = ("user_id", "component_id", "thread_id", "title", "body", "options", "allow_text",
            "sensitive", "bar")
    # options travel as JSON text: asyncpg would read a list inside a jsonb[] as a dimension
    args = [[json.dumps(r[c]) if c == "options" else r[c] for r in rows] for c in cols]
    created = await conn.fetch(INSERT_CARRIERS, *args)
    return [dict(r) for r in created]


async def ids_by_component(conn: asyncpg.Connection,
                           components: list[tuple[str, str]]) -> dict[tuple[str, str], int]:
    """The decision id of each ``(user_id, component_id)`` that has a carrier."""
    rows = await conn.fetch(IDS_BY_DEDUPE, [u for u, _ in components],
                            [f"ask:{c}" for _, c in components])
    return {(r["user_id"], r["component_id"]): int(r["id"]) for r in rows}
