"""A person's settings (``/v1/settings``): read (written first from his
``Accept-Language``), changed, and what a change does to his open cards: their due times
recomputed, set-wise, in the same transaction. A surface: it calls down into ``prefs`` and
``components``, which both read the settings, so neither of them depends on this."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

import asyncpg

from maxclaw.cards.definitions import components_of_tool_call
from maxclaw.cards.rules import ThreadFacts, main_may_take
from maxclaw.clock import Clock
from maxclaw.components import sweep_store
from maxclaw.components.projections import posted_state
from maxclaw.db.database import Database
from maxclaw.errors import Invalid
from maxclaw.prefs import quiet as q
from maxclaw.prefs import store
from maxclaw.prefs.catalogue import from_accept_language, locale_of
from maxclaw.prefs.due import MAIN_TIMEOUT_MINUTES, card_due
from maxclaw.prefs.rows import PrefsRow
from maxclaw.timefmt import rfc3339_or_none

QUIET_PUSH = ("passive", "hold")
FIELDS = ("locale", "time_zone", "quiet_hours", "main_may_answer_during_quiet_hours",
          "quiet_push", "main_after_minutes", "main_may_take_cards", "main_timeout_minutes")


def _at(field: str, *rest: str | int) -> list[str | int]:
    return ["body", field, *rest]


def checked_quiet_hours(value: Any) -> dict[str, Any] | None:
    """``{"start": "HH:MM", "end": "HH:MM", "days": [1..7] | null}`` or null, normalised;
    ``Invalid`` naming the field otherwise."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise Invalid.at(_at("quiet_hours"), "quiet hours are {start, end, days} or null")
    parsed: dict[str, int] = {}
    for key in ("start", "end"):
        raw = value.get(key)
        try:
            parsed[key] = q.parse_hhmm(raw if isinstance(raw, str) else "")
        except ValueError:
            raise Invalid.at(_at("quiet_hours", key),
                             f"{key} must be a time of day as HH:MM, e.g. 22:30") from None
    if parsed["start"] == parsed["end"]:
        raise Invalid.at(_at("quiet_hours", "end"),
                         "the window is empty: start and end must differ")
    days = value.get("days")
    if days is not None and (
            not isinstance(days, list) or not days
            or not all(isinstance(d, int) and not isinstance(d, bool) and 1 <= d <= 7
                       for d in days)):
        raise Invalid.at(_at("quiet_hours", "days"),
                         "days are ISO weekdays (1 = Monday … 7 = Sunday), at least one, "
                         "or null for every day")
    return {"start": q.format_hhmm(parsed["start"]), "end": q.format_hhmm(parsed["end"]),
            "days": sorted(set(days)) if days is not None else None}


def changed(row: PrefsRow, patch: dict[str, Any]) -> PrefsRow:
    """``row`` with the fields ``patch`` names, each checked (``Invalid`` naming it)."""
    out = row
    if "locale" in patch:  # an unknown locale is English, never an error
        out = replace(out, locale=locale_of(patch["locale"] if isinstance(patch["locale"], str)
                                            else None))
    if "time_zone" in patch:
        name = patch["time_zone"]
        try:
            q.zone(name if isinstance(name, str) and name else "")
        except ValueError:
            raise Invalid.at(_at("time_zone"), "not an IANA time zone name, e.g. "
                             "Asia/Shanghai or Europe/Berlin") from None
        out = replace(out, time_zone=name)
    if "quiet_hours" in patch:
        out = replace(out, quiet_hours=checked_quiet_hours(patch["quiet_hours"]))
    for flag in ("main_may_answer_during_quiet_hours", "main_may_take_cards"):
        if flag in patch:
            if not isinstance(patch[flag], bool):
                raise Invalid.at(_at(flag), "must be true or false")
            out = replace(out, **{flag: patch[flag]})
    if "quiet_push" in patch:
        if patch["quiet_push"] not in QUIET_PUSH:
            raise Invalid.at(_at("quiet_push"), "must be passive or hold")
        out = replace(out, quiet_push=patch["quiet_push"])
    if "main_after_minutes" in patch:
        minutes = patch["main_after_minutes"]
        if not isinstance(minutes, int) or isinstance(minutes, bool) \
                or not 0 <= minutes <= 10080:
            raise Invalid.at(_at("main_after_minutes"), "an integer from 0 to 10,080")
        out = replace(out, main_after_minutes=minutes)
    if "main_timeout_minutes" in patch:  # null: the server's default
        minutes = patch["main_timeout_minutes"]
        if minutes is not None and (not isinstance(minutes, int) or isinstance(minutes, bool)
                                    or not 1 <= minutes <= 10080):
            raise Invalid.at(_at("main_timeout_minutes"),
                             "an integer from 1 to 10,080, or null for the server's default")
        out = replace(out, main_timeout_minutes=minutes)
    return out


def projection(row: PrefsRow, now: datetime) -> dict[str, Any]:
    """``GET /v1/settings``: the settings and whether quiet hours hold now."""
    until = row.quiet_until(now)
    return {"locale": row.locale, "time_zone": row.time_zone, "quiet_hours": row.quiet_hours,
            "main_may_answer_during_quiet_hours": row.main_may_answer_during_quiet_hours,
            "quiet_push": row.quiet_push, "main_after_minutes": row.main_after_minutes,
            "main_may_take_cards": row.main_may_take_cards,
            "main_timeout_minutes": row.main_timeout_minutes,
            "quiet_now": until is not None, "quiet_until": rfc3339_or_none(until)}


async def recompute_due(conn: asyncpg.Connection, prefs: PrefsRow) -> int:
    """His open cards' due times under ``prefs``, set-wise: one read (locking them), one
    update of those that change and one mirror of their ``display.states``; returns how many
    changed. Cards Main may not take keep theirs (the sweep clears it)."""
    rows = await store.open_cards(conn, prefs.user_id)
    due: dict[str, datetime | None] = {}
    for r in rows:
        call_id = r.id.rsplit(":", 1)[0]
        call = next((c for c in r.tool_calls or [] if c.get("id") == call_id), None)
        if call is None:
            continue
        card = components_of_tool_call(call)
        facts = ThreadFacts(r.thread_id, r.thread_kind, r.category, r.thread_title)
        if not main_may_take(card, facts):
            continue
        due[r.id] = card_due(prefs, card, start=r.due_from or r.posted_at,
                             watched=r.decision_id is None)
    if not due:
        return 0
    moved = await store.set_due(conn, prefs.user_id, due)
    patches: dict[tuple[str, int], dict[str, dict[str, object]]] = {}
    for m in moved:
        patches.setdefault((prefs.user_id, m.tool_message_id), {})[m.id] = \
            posted_state(m.due_at, m.expires_at, True)
    if patches:
        await sweep_store.mirror_many(conn, patches)
    return len(moved)


class PrefsService:
    """``GET`` and ``PATCH /v1/settings``."""

    def __init__(self, db: Database, clock: Clock,
                 main_timeout_minutes: int = MAIN_TIMEOUT_MINUTES) -> None:
        self.db = db
        self.clock = clock
        self.main_timeout_minutes = main_timeout_minutes  # the server's default

    async def get(self, user_id: str, accept_language: str | None) -> dict[str, Any]:
        """His settings; the first read stores them, the locale from ``Accept-Language``."""
        async with self.db.connection() as conn:
            row = await store.ensure(conn, user_id, from_accept_language(accept_language))
        return projection(row, self.clock.now())

    async def patch(self, user_id: str, patch: dict[str, Any],
                    accept_language: str | None) -> dict[str, Any]:
        """Change the settings ``patch`` names; his open cards' due times (and the moments the
        cards Main holds go back to him) follow in the same transaction."""
        unknown = sorted(set(patch) - set(FIELDS) - {"quiet_now", "quiet_until"})
        if unknown:
            raise Invalid.at(_at(unknown[0]), "not a setting")
        async with self.db.transaction() as conn:
            row = await store.lock(conn, user_id, from_accept_language(accept_language))
            new = changed(row, patch)
            if new != row:
                new = await store.update(conn, new)
                await recompute_due(conn, new)
                # the cards Main holds now: their time to decide moves by the change
                shift = ((new.main_timeout_minutes or self.main_timeout_minutes)
                         - (row.main_timeout_minutes or self.main_timeout_minutes))
                if shift:
                    await store.shift_main_due(conn, user_id, shift)
                await store.release_held(conn, user_id, self.clock.now())
        return projection(new, self.clock.now())
