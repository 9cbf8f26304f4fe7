"""A queued push made his: his locale's words on the buttons and how loudly it may interrupt
him now (issue 29). Pure: the dispatcher calls it at send time with his settings and the
clock, so a push queued at 22:00 and sent at 23:00 follows the quiet hours of 23:00.

- Inside his quiet hours a notification is ``passive`` (APNs ``interruption-level: passive``,
  no sound; Web Push ``silent: true``, no vibration), or held until the window ends when he
  chose ``hold``. Outside them it is ``active`` unless the card's agent marked it
  ``urgency: "time-sensitive"`` (nothing is time-sensitive by default).
- Buttons and placeholders come from the catalogue in his locale; the card's own words (the
  thread title, the question, option labels) are shown as written. Withdrawals are not
  notifications: they pass unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from maxclaw.prefs.catalogue import text
from maxclaw.prefs.rows import PrefsRow

PASSIVE, ACTIVE, TIME_SENSITIVE = "passive", "active", "time-sensitive"
# the catalogue key of each fixed button, by action id (option buttons are the card's labels)
ACTION_KEYS = {"other": "push.other", "why": "push.why", "revoke": "push.revoke"}


@dataclass(frozen=True, slots=True)
class Shaped:
    """What to send now (``payload``), or when to try again (``hold_until``)."""

    payload: dict[str, Any]
    hold_until: datetime | None = None


def interruption(prefs: PrefsRow, urgency: object, now: datetime) -> str:
    """``passive`` inside quiet hours, else ``time-sensitive`` only when the agent asked."""
    if prefs.quiet_until(now) is not None:
        return PASSIVE
    return TIME_SENSITIVE if urgency == TIME_SENSITIVE else ACTIVE


def localised(payload: dict[str, Any], locale: str) -> dict[str, Any]:
    """The payload's fixed words in ``locale`` (and ``labels`` a client builds buttons from)."""
    out = dict(payload)
    out["locale"] = locale
    out["labels"] = {"open": text(locale, "push.open"), "other": text(locale, "push.other"),
                     "reply": text(locale, "push.reply")}
    if isinstance(payload.get("actions"), list):
        out["actions"] = [
            {**a, "title": text(locale, ACTION_KEYS[a["id"]])}
            if isinstance(a, dict) and a.get("id") in ACTION_KEYS else a
            for a in payload["actions"]]
    reply = payload.get("reply")
    if isinstance(reply, dict):
        key = "push.secret" if payload.get("secret") else "push.reply"
        out["reply"] = {**reply, "placeholder": text(locale, key)}
    return out


def shape(kind: str, payload: dict[str, Any], prefs: PrefsRow, now: datetime) -> Shaped:
    """The push of an outbox row of ``kind`` as it goes out to him at ``now``."""
    if kind == "activity":
        return Shaped({**payload, "locale": prefs.locale})
    if kind != "notify":
        return Shaped(payload)
    until = prefs.quiet_until(now)
    if until is not None and prefs.quiet_push == "hold":
        return Shaped(payload, hold_until=until)
    level = interruption(prefs, payload.get("urgency"), now)
    out = localised(payload, prefs.locale)
    out["interruption_level"] = level
    out["silent"] = level == PASSIVE
    return Shaped(out)
