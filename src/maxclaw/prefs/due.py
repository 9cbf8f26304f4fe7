"""When a card goes to Main, and when it comes back: its due clock under the person's settings,
and Main's time to decide it (pure)."""

from __future__ import annotations

from datetime import datetime, timedelta

from maxclaw.cards.definitions import Card
from maxclaw.prefs.rows import PrefsRow

# Main's time to decide a card handed to it, when neither he nor the server says otherwise
# (settings.main_timeout_minutes, MAXCLAW_MAIN_TIMEOUT_MINUTES)
MAIN_TIMEOUT_MINUTES = 30
# a card posted while Max watches its thread is due an hour later (no carrier meanwhile)
WATCHED_MINUTES = 60
WATCHED_DUE = timedelta(minutes=WATCHED_MINUTES)


def clock_minutes(prefs: PrefsRow, card: Card, *, watched: bool) -> int | None:
    """The minutes of the card's due clock; None when it never goes to Main by time: the
    agent said ``main_after_minutes: null``, or he does not let Main take cards at all. An
    agent that left ``main_after_minutes`` out gets his default."""
    if card.main_after_minutes is None or not prefs.main_may_take_cards:
        return None
    if watched:
        return WATCHED_MINUTES
    return card.main_after_minutes if card.main_after_given else prefs.main_after_minutes


def card_due(prefs: PrefsRow, card: Card, *, start: datetime, watched: bool) -> datetime | None:
    """The moment the card is handed to Main (None: never by time). With Main not allowed
    during quiet hours the clock pauses inside them, so the moment is never in a window."""
    minutes = clock_minutes(prefs, card, watched=watched)
    return None if minutes is None else prefs.due_at(start, minutes)


def main_due(prefs: PrefsRow, start: datetime, default_minutes: int) -> datetime:
    """When a card handed to Main at ``start`` goes back to Max if Main has neither answered
    nor handed it back: his ``main_timeout_minutes`` later (``default_minutes``, the server's,
    when he set none). Plain elapsed time: quiet hours do not pause it (the push that tells
    him follows his quiet hours)."""
    minutes = prefs.main_timeout_minutes or default_minutes
    return start + timedelta(minutes=minutes)
