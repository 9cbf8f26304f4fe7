"""SQL for a person's settings (``user_settings``) and the due times they govern."""

from __future__ import annotations

from datetime import datetime

import asyncpg

from maxclaw.prefs.rows import DueSet, OpenCardRow, PrefsRow, of_json

__all__ = ["of_json"]  # read inside other stores' statements (to_jsonb(user_settings))

PREFS_COLUMNS = """user_id::text, locale, time_zone, quiet_hours,
       main_may_answer_during_quiet_hours, quiet_push, main_after_minutes, main_may_take_cards,
       main_timeout_minutes"""

GET_PREFS = f"SELECT {PREFS_COLUMNS} FROM user_settings WHERE user_id = $1"

# the first read writes the row (with the locale the request's Accept-Language names), so the
# locale a person first saw stays his until he changes it; a concurrent first read loses the
# race harmlessly and reads the winner's row
CREATE_PREFS = f"""
INSERT INTO user_settings (user_id, locale) VALUES ($1, $2)
ON CONFLICT (user_id) DO UPDATE SET user_id = EXCLUDED.user_id
RETURNING {PREFS_COLUMNS}
"""

# the row locked for a change (FOR UPDATE): two changes of one person's settings serialise,
# so the due times the second recomputes see the first's values
LOCK_PREFS = f"SELECT {PREFS_COLUMNS} FROM user_settings WHERE user_id = $1 FOR UPDATE"

UPDATE_PREFS = f"""
UPDATE user_settings
   SET locale = $2, time_zone = $3, quiet_hours = $4::jsonb,
       main_may_answer_during_quiet_hours = $5, quiet_push = $6, main_after_minutes = $7,
       main_may_take_cards = $8, main_timeout_minutes = $9, updated_at = now()
 WHERE user_id = $1
RETURNING {PREFS_COLUMNS}
"""


GET_MANY = f"SELECT {PREFS_COLUMNS} FROM user_settings WHERE user_id = ANY($1::uuid[])"


async def get_many(conn: asyncpg.Connection, user_ids: list[str]) -> dict[str, PrefsRow]:
    """The settings of several users (a sweep's batch); the defaults for one without a row."""
    found = {r.user_id: r for r in map(_row, await conn.fetch(GET_MANY, sorted(set(user_ids))))}
    return {u: found.get(u) or PrefsRow(user_id=u) for u in user_ids}


def _row(record: asyncpg.Record) -> PrefsRow:
    return PrefsRow.from_record(record)


async def get(conn: asyncpg.Connection, user_id: str) -> PrefsRow:
    """The user's settings, or the defaults when he has never set any (nothing written)."""
    record = await conn.fetchrow(GET_PREFS, user_id)
    return PrefsRow(user_id=user_id) if record is None else _row(record)


async def ensure(conn: asyncpg.Connection, user_id: str, locale: str) -> PrefsRow:
    """The user's settings, written first with ``locale`` if he has none yet."""
    return _row(await conn.fetchrow(CREATE_PREFS, user_id, locale))


async def lock(conn: asyncpg.Connection, user_id: str, locale: str) -> PrefsRow:
    """The user's settings row, created if missing and locked for this transaction."""
    await conn.fetchrow(CREATE_PREFS, user_id, locale)
    return _row(await conn.fetchrow(LOCK_PREFS, user_id))


async def update(conn: asyncpg.Connection, row: PrefsRow) -> PrefsRow:
    """Write every setting of ``row``; returns what was stored."""
    return _row(await conn.fetchrow(
        UPDATE_PREFS, row.user_id, row.locale, row.time_zone, row.quiet_hours,
        row.main_may_answer_during_quiet_hours, row.quiet_push, row.main_after_minutes,
        row.main_may_take_cards, row.main_timeout_minutes))


# ----- the user's open cards, whose due times a settings change recomputes -----

# Through message_components_user_open (its predicate written out); locked in id order, the
# order the sweeps' claims and answers take component rows.
OPEN_CARDS = """
SELECT c.id, c.thread_id::text, c.posted_at, c.due_from, c.due_at, c.decision_id, c.tool_message_id,
       m.tool_calls, t.kind AS thread_kind, t.category, t.title AS thread_title
  FROM message_components c
  JOIN messages m ON m.user_id = c.user_id AND m.id = c.message_id
  JOIN threads t ON t.user_id = c.user_id AND t.id = c.thread_id
 WHERE c.user_id = $1 AND c.status = 'open'
 ORDER BY c.id
   FOR UPDATE OF c
"""

SET_DUE = """
UPDATE message_components c
   SET due_at = x.due_at, updated_at = now()
  FROM unnest($2::text[], $3::timestamptz[]) AS x(id, due_at)
 WHERE c.user_id = $1 AND c.id = x.id AND c.status = 'open'
   AND c.due_at IS DISTINCT FROM x.due_at
RETURNING c.id, c.due_at, c.expires_at, c.tool_message_id
"""


async def open_cards(conn: asyncpg.Connection, user_id: str) -> list[OpenCardRow]:
    """The user's open cards with what their due time depends on, locked."""
    return [OpenCardRow.from_record(r) for r in await conn.fetch(OPEN_CARDS, user_id)]


async def set_due(conn: asyncpg.Connection, user_id: str,
                  due: dict[str, datetime | None]) -> list[DueSet]:
    """Set the due times of open cards (by id) in one statement; the rows that changed."""
    ids = list(due)
    return [DueSet.from_record(r)
            for r in await conn.fetch(SET_DUE, user_id, ids, [due[i] for i in ids])]


# The cards Main holds: their time to decide moved by $2 minutes when he changes
# main_timeout_minutes (each was set to the hand-off moment plus the old minutes). Locked in id
# order, as the other writers of several components take them.
SHIFT_MAIN_DUE = """
UPDATE message_components c
   SET main_due_at = c.main_due_at + make_interval(mins => $2), updated_at = now()
  FROM (SELECT id FROM message_components
         WHERE user_id = $1 AND status = 'with-main' AND main_due_at IS NOT NULL
         ORDER BY id FOR UPDATE) AS x
 WHERE c.user_id = $1 AND c.id = x.id AND c.status = 'with-main'
"""


async def shift_main_due(conn: asyncpg.Connection, user_id: str, minutes: int) -> int:
    """Move the moments the cards Main holds go back to him by ``minutes``; how many."""
    result = await conn.execute(SHIFT_MAIN_DUE, user_id, minutes)
    return int(result.split()[-1])


# Held notifications (``quiet_push: hold``: pending, no error, due at a window's end) are due
# again at once after a settings change, so a window he shortened or removed releases them; the
# dispatcher shapes each one afresh and holds it again if he is still in quiet hours. Through
# push_outbox_user_ready (user_id, next_attempt_at).
RELEASE_HELD = """
UPDATE push_outbox SET next_attempt_at = $2
 WHERE user_id = $1 AND status = 'pending'
   AND kind = 'notify' AND last_error IS NULL AND next_attempt_at > $2
"""


async def release_held(conn: asyncpg.Connection, user_id: str, now: datetime) -> int:
    """Make his held notifications due ``now``; returns how many."""
    result = await conn.execute(RELEASE_HELD, user_id, now)
    return int(result.split()[-1])
