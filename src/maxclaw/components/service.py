"""ComponentService: the card package's one entry point for routes, tools and the sweeper.

A thin facade: each job lives in its own module, and this class hands each call to it.

    posting.py    post_card, card_rows, get, open_components
    answers.py    answer (card, panel, push), answer_card, remember
    handoff.py    to_main, main_answer, hand_back, revoke
    withdraw.py   withdraw (and supersede), in_thread, card_component_ids
    retract.py    retract (Max takes his answer back)
    sweeps.py     sweep_due, sweep_unwatched, sweep_expired, sweep_main_timeout (and their
                  *_all loops)

Every job moves a card the same way (``moves.CardJob``: the CAS with its mirror and audit),
and every consequence of a move is one function in ``effects.py``.
"""

from __future__ import annotations

from maxclaw.clock import Clock
from maxclaw.components.answers import Answers
from maxclaw.components.handoff import HandOff
from maxclaw.components.posting import ContentFor, Posting
from maxclaw.components.projections import component_projection, definition_of
from maxclaw.components.retract import WINDOW_MINUTES, Retractions
from maxclaw.components.sweeps import Sweeps
from maxclaw.components.withdraw import Withdrawals
from maxclaw.db.database import Database
from maxclaw.metrics import Metrics
from maxclaw.prefs.due import MAIN_TIMEOUT_MINUTES
from maxclaw.secrets.service import SecretService

__all__ = ["ComponentService", "ContentFor", "component_projection", "definition_of"]


class ComponentService:
    """Cards: post, answer, hand to Main and back, revoke, withdraw, sweep."""

    def __init__(self, db: Database, clock: Clock, metrics: Metrics,
                 secrets: SecretService, *,
                 retract_window_minutes: float = WINDOW_MINUTES,
                 main_timeout_minutes: int = MAIN_TIMEOUT_MINUTES) -> None:
        self.db = db
        self.clock = clock
        parts = (db, clock, metrics, secrets)
        self.posting = Posting(*parts)
        self.answers = Answers(*parts)
        # main_timeout_minutes: Main's time to decide a card, for users who set none
        self.handoff = HandOff(*parts, main_timeout_minutes=main_timeout_minutes)
        self.withdrawals = Withdrawals(*parts)
        self.sweeps = Sweeps(*parts, main_timeout_minutes=main_timeout_minutes)
        self.retractions = Retractions(*parts, window_minutes=retract_window_minutes)
        # the definitions cache (tests clear it to act as a replica that did not post)
        self._definitions = self.answers._definitions
        self.get = self.posting.get
        self.open_components = self.posting.open_components
        self.post_card = self.posting.post_card
        self.card_rows = self.posting.card_rows
        self.answer = self.answers.answer
        self.answer_card = self.answers.answer_card
        self.remember = self.answers.remember
        self.to_main = self.handoff.to_main
        self.main_answer = self.handoff.main_answer
        self.hand_back = self.handoff.hand_back
        self.revoke = self.handoff.revoke
        self.retract = self.retractions.retract
        self.withdraw = self.withdrawals.withdraw
        self.in_thread = self.withdrawals.in_thread
        self.card_component_ids = self.withdrawals.card_component_ids
        self.sweep_due = self.sweeps.sweep_due
        self.sweep_due_all = self.sweeps.sweep_due_all
        self.sweep_expired = self.sweeps.sweep_expired
        self.sweep_expired_all = self.sweeps.sweep_expired_all
        self.sweep_unwatched = self.sweeps.sweep_unwatched
        self.sweep_main_timeout = self.sweeps.sweep_main_timeout
        self.sweep_main_timeout_all = self.sweeps.sweep_main_timeout_all
        self.sweep_unwatched_all = self.sweeps.sweep_unwatched_all
