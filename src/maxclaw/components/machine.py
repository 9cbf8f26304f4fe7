"""The card's state machine as data: who may move a component from where to where, and what
each move implies.

A leaf module (it imports nothing of the project): the service looks transitions up here, the
store receives their from-states as SQL parameters (``WHERE status = ANY($n)``), the WebUI gets
``answerable_here`` and ``main_may_take`` computed from it, and the tests walk it
(``tests/unit/test_machine.py`` without a database, ``tests/integration/test_transitions.py``
on PostgreSQL).

Reading the table: a row is ``(name, from states, to state, actor, surface)``. A request names
its transition (``answer`` from the ``card``, ``revoke``…); the CAS succeeds only if the
component's status is one of the row's from-states, otherwise the request is refused with
``refusal(row, status)`` and nothing is written. ``effects`` lists, in the order the service
runs them, everything the move implies inside the same transaction (the CAS, the mirror into
``display.states`` and the audit row are common to all and not listed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class Status(StrEnum):
    """A component's status (``message_components.status``, ``display.states[id].status``)."""

    OPEN = "open"
    ANSWERED = "answered"
    WITH_MAIN = "with-main"
    MAIN_ANSWERED = "main-answered"
    REVOKED = "revoked"
    HANDED_BACK = "handed-back"
    WITHDRAWN = "withdrawn"  # the agent withdrew it (``withdraw_question``, ``supersedes``)
    EXPIRED = "expired"  # ``expires_after_minutes`` passed unanswered


class Actor(StrEnum):
    """Who moves the card (``component_audit.actor``)."""

    MAX = "max"
    MAIN = "main"
    SWEEPER = "sweeper"
    AGENT = "agent"  # the asking thread's agent


class Surface(StrEnum):
    """Where the request comes from. ``card``, ``decision`` and ``push`` are Max's three
    places to answer (``answered_via``); ``main`` is Main's tools; ``sweep`` the due sweep."""

    CARD = "card"
    DECISION = "decision"
    PUSH = "push"
    MAIN = "main"
    SWEEP = "sweep"
    TOOL = "tool"  # the asking agent's tools (``withdraw_question``, ``supersedes``)


class Effect(StrEnum):
    """A consequence of a transition, run inside its transaction."""

    ANSWER_MESSAGE = "the answer as Max's message in the asking thread; it wakes the thread"
    SETTLE_CARRIER = "the carrier settled with the answer; its pushes withdrawn"
    ENSURE_CARRIER = "a carrier ensured (created and pushed if missing), so the panel and " \
                     "push can still answer"
    HANDOFF_MESSAGE = "the hand-off message in Main's thread; Main's thread woken"
    REOPEN_CARRIER = "the carrier reopened through its kind's reverter (pushed again)"
    REVOKE_EVENT = "an event row in the asking thread; it wakes the thread"
    WITHDRAW_CARRIER = "the carrier settled as withdrawn (or expired); its pushes withdrawn"
    TELL_MAIN = "if Main held it: an event row in Main's thread saying it is no longer Main's " \
                "to decide (withdrawn, expired, answered by Max, or back with Max because " \
                "Main's time was up); it does not wake Main"
    EXPIRY_EVENT = "an event row in the asking thread ('expired unanswered'); it wakes it"
    ORIGIN_EVENT = "an event row in the asking thread saying where the question went ('handed " \
                   "to Main', 'Main answered', 'Main handed it back'); it does not wake it"
    TELL_MAX = "a push to Max: what Main answered (Why? / Revoke, a revoke-scoped action " \
               "token), or the question again with Main's hand-back note"
    WITHDRAW_ANSWER = "the answer message taken back: out of the thread's undelivered input " \
                      "(no model ever reads it), shown as taken back, a secret's sealed box " \
                      "destroyed; a wake-up not started yet is cancelled if nothing else waits"
    REDUE = "the card's due moment recomputed from now (main_after_minutes) and mirrored"


@dataclass(frozen=True)
class Transition:
    """One row of the table."""

    name: str
    sources: frozenset[Status]
    target: Status
    actor: Actor
    surface: Surface
    effects: tuple[Effect, ...] = ()
    # the refusal code (``ComponentError`` reason) when the status is not a source
    refused: str = "conflict"
    # a refusal code for particular statuses, overriding ``refused``
    refused_from: dict[Status, str] = field(default_factory=dict)
    clears_answer: bool = False  # the answer (and who/when) is wiped
    # a request on a component already in the to-state succeeds and writes nothing
    idempotent: bool = False
    # the refusal's message per code, when it says more than ``ComponentError``'s default
    # (``{status}`` is the status found)
    texts: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, Surface]:
        return (self.name, self.surface)

    def allows(self, status: Status | str | None) -> bool:
        return status is not None and Status(status) in self.sources

    def refusal(self, status: Status | str | None) -> str:
        """The code a request is refused with when the component is in ``status``: a
        withdrawn or expired card says so (from every surface), else the row's code."""
        if status is None:  # the row is gone (its thread was deleted)
            return self.refused
        status = Status(status)
        return self.refused_from.get(status, _ENDED.get(status, self.refused))

    def refusal_text(self, code: str, status: Status | str | None) -> str | None:
        """The refusal's message for the model or client, or None for the default."""
        text = self.texts.get(code)
        return text.format(status=status) if text is not None else None

    def source_list(self) -> list[str]:
        """The from-states as the SQL parameter (``status = ANY($n::text[])``), sorted."""
        return sorted(s.value for s in self.sources)


S = Status
_ENDED = {S.WITHDRAWN: "withdrawn", S.EXPIRED: "expired"}
_UNSETTLED = frozenset({S.OPEN, S.WITH_MAIN, S.HANDED_BACK, S.REVOKED})
_MAX_ANSWERS_FROM_CARD = frozenset({S.OPEN, S.REVOKED, S.HANDED_BACK})
# the card is locked while Main holds it; the panel and push are not (answering first from
# elsewhere is legitimate)
_MAX_ANSWERS_ELSEWHERE = _MAX_ANSWERS_FROM_CARD | {S.WITH_MAIN}
_ANSWER_EFFECTS = (Effect.ANSWER_MESSAGE, Effect.SETTLE_CARRIER)
# Max's answer: when Main held the card (panel or push), Main's thread is told it is settled,
# so a Main mid-turn on a stale hand-off learns before it answers (which is 409 settled anyway)
_MAX_ANSWER_EFFECTS = (*_ANSWER_EFFECTS, Effect.TELL_MAIN)
_NOT_WITH_MAIN = "The question is {status}, not with Main."


def _answer(surface: Surface, sources: frozenset[Status]) -> Transition:
    return Transition("answer", sources, S.ANSWERED, Actor.MAX, surface, _MAX_ANSWER_EFFECTS,
                      refused="settled",
                      refused_from={S.WITH_MAIN: "locked"} if S.WITH_MAIN not in sources else {})


def _revoke(surface: Surface) -> Transition:
    return Transition("revoke", frozenset({S.MAIN_ANSWERED}), S.REVOKED, Actor.MAX, surface,
                      (Effect.REOPEN_CARRIER, Effect.REVOKE_EVENT), clears_answer=True,
                      texts={"conflict": "Only an answer Main gave can be revoked."})


# the asking thread's history says where its question went (the event does not wake it)
_HAND_BACK_EFFECTS = (Effect.ORIGIN_EVENT, Effect.TELL_MAX)
# the hand-back note of a card whose time with Main ran out (Max reads it as Main's note)
MAIN_TIMEOUT_NOTE = "Main did not decide"
_TO_MAIN_EFFECTS = (Effect.ENSURE_CARRIER, Effect.HANDOFF_MESSAGE, Effect.ORIGIN_EVENT)

TRANSITIONS: tuple[Transition, ...] = (
    _answer(Surface.CARD, _MAX_ANSWERS_FROM_CARD),
    _answer(Surface.DECISION, _MAX_ANSWERS_ELSEWHERE),
    _answer(Surface.PUSH, _MAX_ANSWERS_ELSEWHERE),
    # "let Main decide" (only where ``main_may_take``; else 409 not_transferable)
    Transition("to-main", frozenset({S.OPEN}), S.WITH_MAIN, Actor.MAX, Surface.CARD,
               _TO_MAIN_EFFECTS),
    # the due sweep: cards Main may take go to Main, the others stay open with a carrier
    Transition("to-main", frozenset({S.OPEN}), S.WITH_MAIN, Actor.SWEEPER, Surface.SWEEP,
               _TO_MAIN_EFFECTS),
    Transition("keep-open", frozenset({S.OPEN}), S.OPEN, Actor.SWEEPER, Surface.SWEEP,
               (Effect.ENSURE_CARRIER,)),
    # presence re-judged: a card posted while Max watched its thread (no carrier yet) gets its
    # carrier and push once nobody watches, and its due time restarts from that moment
    Transition("unwatched", frozenset({S.OPEN}), S.OPEN, Actor.SWEEPER, Surface.SWEEP,
               (Effect.ENSURE_CARRIER,)),
    # Main's tools (irreversible cards: answer_for_max is refused before the CAS); the history
    # row comes first so the asking agent reads where the answer came from, then the answer
    # (the row does not wake it; the answer does)
    Transition("answer_for_max", frozenset({S.WITH_MAIN}), S.MAIN_ANSWERED, Actor.MAIN,
               Surface.MAIN, (Effect.ORIGIN_EVENT, *_ANSWER_EFFECTS, Effect.TELL_MAX),
               refused_from={S.ANSWERED: "settled"},
               texts={"settled": "Max already answered this question elsewhere; nothing was "
                                 "answered on his behalf",
                      "conflict": _NOT_WITH_MAIN}),
    Transition("hand_back", frozenset({S.WITH_MAIN}), S.HANDED_BACK, Actor.MAIN, Surface.MAIN,
               _HAND_BACK_EFFECTS, texts={"conflict": _NOT_WITH_MAIN}),
    # Main's time to decide is up (main_due_at: his main_timeout_minutes after the hand-off)
    # and it has neither answered nor handed back: the sweep hands the card back to Max as
    # Main's hand-back does, with the note MAIN_TIMEOUT_NOTE, and tells Main's thread (set-wise)
    Transition("main-timeout", frozenset({S.WITH_MAIN}), S.HANDED_BACK, Actor.SWEEPER,
               Surface.SWEEP, (*_HAND_BACK_EFFECTS, Effect.TELL_MAIN)),
    _revoke(Surface.CARD),
    # Max takes back his own answer (a mis-tap) before any model was handed it and within the
    # retract window (both checked before the CAS: ``409 seen`` / ``409 too_late``); Main's
    # answers are revoked, not retracted
    Transition("retract", frozenset({S.ANSWERED}), S.OPEN, Actor.MAX, Surface.CARD,
               (Effect.WITHDRAW_ANSWER, Effect.REOPEN_CARRIER, Effect.REDUE),
               clears_answer=True, refused_from={S.MAIN_ANSWERED: "settled"},
               texts={"conflict": "Only an answer Max gave can be taken back; the question "
                                  "is {status}.",
                      "settled": "Main answered this question; revoke it instead."}),
    # the Revoke button of the "Main answered … for you" push (its revoke-scoped token)
    _revoke(Surface.PUSH),
    # the asking agent ends a question it no longer needs (withdraw_question, supersedes);
    # withdrawing a withdrawn one again is a no-op success, not a transition
    Transition("withdraw", _UNSETTLED, S.WITHDRAWN, Actor.AGENT, Surface.TOOL,
               (Effect.WITHDRAW_CARRIER, Effect.TELL_MAIN), refused="settled", idempotent=True,
               texts={"settled": "The question is already {status}; nothing was withdrawn."}),
    # expires_after_minutes passed: the sweeper ends it and tells the asking agent (set-wise)
    Transition("expire", _UNSETTLED, S.EXPIRED, Actor.SWEEPER, Surface.SWEEP,
               (Effect.WITHDRAW_CARRIER, Effect.TELL_MAIN, Effect.EXPIRY_EVENT)),
)
_BY_KEY = {t.key: t for t in TRANSITIONS}
assert len(_BY_KEY) == len(TRANSITIONS), "a (name, surface) pair names one row"

# Statuses whose answer is still to come (what ``finish`` reports, what withdraw may end).
UNSETTLED: frozenset[Status] = _UNSETTLED
SETTLED: frozenset[Status] = frozenset(Status) - UNSETTLED
# The surfaces Max answers from (the ``answered_via`` of his answers).
MAX_SURFACES: tuple[Surface, ...] = (Surface.CARD, Surface.DECISION, Surface.PUSH)


def transition(name: str, surface: Surface | str) -> Transition:
    """The row for a request; ``KeyError`` if no such move exists from that surface."""
    return _BY_KEY[(name, Surface(surface))]


def answerable(surface: Surface | str) -> frozenset[Status]:
    """The statuses Max may answer from on ``surface``."""
    return transition("answer", surface).sources


def answerable_here(status: Status | str) -> bool:
    """Whether the card itself takes Max's answer now (the WebUI enables its controls)."""
    return Status(status) in answerable(Surface.CARD)


def may_hand_to_main(status: Status | str, rule: bool) -> bool:
    """Whether "let Main decide" is offered now: the card-level rule (``rules.main_may_take``)
    and a status ``to-main`` leaves from."""
    return rule and transition("to-main", Surface.CARD).allows(status)


def statuses(values: frozenset[Status]) -> list[str]:
    """A set of statuses as a sorted SQL parameter."""
    return sorted(s.value for s in values)


def table_rows() -> list[tuple[str, str, str, str, str]]:
    """The table as ``(name, from states, to state, actor, surface)`` text rows (for docs)."""
    return [(t.name, ", ".join(t.source_list()), t.target.value, t.actor.value, t.surface.value)
            for t in TRANSITIONS]
