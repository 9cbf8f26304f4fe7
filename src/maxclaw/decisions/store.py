"""SQL for the decisions queue (carriers of cards to the panel, push and the nudge bar)."""

from __future__ import annotations

import json
from datetime import datetime

import asyncpg

from maxclaw.decisions.rows import DecisionRow, NewCarrier

# dedupe_key is not among them: it is 'ask:' || component_id for every carrier, and no reader
# needs it back
DECISION_COLUMNS = (
    "id, user_id::text, kind, status, component_id, thread_id::text, title, body,"
    " options, allow_text, sensitive, answer_text, settled_via, bar, bar_snoozed_until,"
    " created_at, settled_at, dismissed_at, rev"
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
BY_DEDUPE = f"SELECT {DECISION_COLUMNS} FROM decisions WHERE user_id = $1::uuid AND dedupe_key = $2"
GET = f"SELECT {DECISION_COLUMNS} FROM decisions WHERE user_id = $1::uuid AND id = $2"
LIST_OPEN = f"""
SELECT {DECISION_COLUMNS} FROM decisions
 WHERE user_id = $1::uuid AND status = 'open' ORDER BY id DESC LIMIT $2
"""
# the panel: open decisions, and those Main answered that Max has not dismissed yet (he may
# still revoke them)
LIST_PANEL = f"""
SELECT {DECISION_COLUMNS} FROM decisions
 WHERE user_id = $1::uuid AND (status = 'open' OR (status = 'settled' AND settled_via = 'main'
                                                   AND dismissed_at IS NULL))
 ORDER BY id DESC LIMIT $2
"""
LIST_ALL = f"""
SELECT {DECISION_COLUMNS} FROM decisions WHERE user_id = $1::uuid ORDER BY id DESC LIMIT $2
"""
SETTLE = f"""
UPDATE decisions SET status = 'settled', answer_text = $3, settled_via = $4, settled_at = now()
 WHERE user_id = $1::uuid AND id = $2 AND status = 'open'
RETURNING {DECISION_COLUMNS}
"""
REOPEN = f"""
UPDATE decisions SET status = 'open', answer_text = NULL, settled_via = NULL, settled_at = NULL,
                     dismissed_at = NULL
 WHERE user_id = $1::uuid AND id = $2 AND status = 'settled'
RETURNING {DECISION_COLUMNS}
"""
# Max dismisses a settled item from the panel; only the first dismissal writes (and takes a rev)
DISMISS = f"""
UPDATE decisions SET dismissed_at = $3
 WHERE user_id = $1::uuid AND id = $2 AND status = 'settled' AND dismissed_at IS NULL
RETURNING {DECISION_COLUMNS}
"""
SNOOZE = f"""
UPDATE decisions SET bar_snoozed_until = $3 WHERE user_id = $1::uuid AND id = $2
RETURNING {DECISION_COLUMNS}
"""


async def insert_carrier(conn: asyncpg.Connection, user_id: str, *, component_id: str,
                         thread_id: str, title: str, body: str, options: list[dict[str, object]],
                         allow_text: bool, sensitive: bool, bar: bool) -> DecisionRow | None:
    """Create the ``agent-question`` decision for a component; None if it already exists."""
    row = await conn.fetchrow(INSERT_CARRIER, user_id, f"ask:{component_id}", component_id,
                              thread_id, title, body, options, allow_text, sensitive, bar)
    return DecisionRow.from_record(row) if row else None


async def by_dedupe(conn: asyncpg.Connection, user_id: str, key: str) -> DecisionRow | None:
    """The user's decision with this dedupe key (``ask:<component id>``), if any."""
    row = await conn.fetchrow(BY_DEDUPE, user_id, key)
    return DecisionRow.from_record(row) if row else None


async def get(conn: asyncpg.Connection, user_id: str, decision_id: int) -> DecisionRow | None:
    """One of the user's decisions, if it is theirs."""
    row = await conn.fetchrow(GET, user_id, decision_id)
    return DecisionRow.from_record(row) if row else None


async def list_decisions(conn: asyncpg.Connection, user_id: str, status: str,
                         limit: int) -> list[DecisionRow]:
    """Newest first; ``status`` is 'open', 'panel' or 'all'."""
    query = {"open": LIST_OPEN, "panel": LIST_PANEL}.get(status, LIST_ALL)
    return [DecisionRow.from_record(r) for r in await conn.fetch(query, user_id, limit)]


async def settle(conn: asyncpg.Connection, user_id: str, decision_id: int, answer_text: str,
                 via: str) -> DecisionRow | None:
    """open → settled; None if it was settled already."""
    row = await conn.fetchrow(SETTLE, user_id, decision_id, answer_text, via)
    return DecisionRow.from_record(row) if row else None


async def reopen(conn: asyncpg.Connection, user_id: str, decision_id: int) -> DecisionRow | None:
    """settled → open (the agent-question reverter); None if it was open."""
    row = await conn.fetchrow(REOPEN, user_id, decision_id)
    return DecisionRow.from_record(row) if row else None


async def dismiss(conn: asyncpg.Connection, user_id: str, decision_id: int,
                  at: datetime) -> DecisionRow | None:
    """settled, not dismissed → dismissed at ``at``; None if open, dismissed already or not
    the user's."""
    row = await conn.fetchrow(DISMISS, user_id, decision_id, at)
    return DecisionRow.from_record(row) if row else None


async def snooze(conn: asyncpg.Connection, user_id: str, decision_id: int,
                 until: datetime) -> DecisionRow | None:
    """Hide the nudge bar for this decision until ``until``; None if not the user's."""
    row = await conn.fetchrow(SNOOZE, user_id, decision_id, until)
    return DecisionRow.from_record(row) if row else None


async def insert_carriers(conn: asyncpg.Connection,
                          rows: list[NewCarrier]) -> list[DecisionRow]:
    """Create several components' decisions in one statement; returns the ones created."""
    # options travel as JSON text: asyncpg would read a list inside a jsonb[] as a dimension
    created = await conn.fetch(
        INSERT_CARRIERS, [r.user_id for r in rows], [r.component_id for r in rows],
        [r.thread_id for r in rows], [r.title for r in rows], [r.body for r in rows],
        [json.dumps(r.options) for r in rows], [r.allow_text for r in rows],
        [r.sensitive for r in rows], [r.bar for r in rows])
    return [DecisionRow.from_record(r) for r in created]


async def ids_by_component(conn: asyncpg.Connection,
                           components: list[tuple[str, str]]) -> dict[tuple[str, str], int]:
    """The decision id of each ``(user_id, component_id)`` that has a carrier."""
    rows = await conn.fetch(IDS_BY_DEDUPE, [u for u, _ in components],
                            [f"ask:{c}" for _, c in components])
    return {(r["user_id"], r["component_id"]): int(r["id"]) for r in rows}
