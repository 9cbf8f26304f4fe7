"""The transitions table, without a database (the card rules beside it: test_card_rules.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from maxclaw.components import machine
from maxclaw.components.machine import (
    MAX_SURFACES,
    SETTLED,
    TRANSITIONS,
    UNSETTLED,
    Actor,
    Effect,
    Status,
    Surface,
    answerable,
    answerable_here,
    may_hand_to_main,
    transition,
)
from maxclaw.errors import ComponentError

SRC = Path(__file__).resolve().parents[2] / "src" / "maxclaw"


def test_the_machine_is_a_leaf() -> None:
    tree = ast.parse((SRC / "components" / "machine.py").read_text())
    imported = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [m for m in imported if m.startswith("maxclaw")], imported


def test_one_row_per_request() -> None:
    keys = [t.key for t in TRANSITIONS]
    assert len(keys) == len(set(keys))
    for t in TRANSITIONS:
        assert t.sources, t.key
        assert transition(t.name, t.surface) is t


def test_every_refusal_is_a_documented_code() -> None:
    for t in TRANSITIONS:
        for status in [*Status, None]:
            if status is None or not t.allows(status):
                assert t.refusal(status) in ComponentError.MESSAGES, (t.key, status)


@pytest.mark.parametrize(("surface", "status", "code"), [
    (Surface.CARD, Status.WITH_MAIN, "locked"),
    (Surface.CARD, Status.ANSWERED, "settled"),
    (Surface.CARD, Status.MAIN_ANSWERED, "settled"),
    (Surface.DECISION, Status.ANSWERED, "settled"),
    (Surface.PUSH, Status.MAIN_ANSWERED, "settled"),
])
def test_answer_refusals(surface: Surface, status: Status, code: str) -> None:
    assert transition("answer", surface).refusal(status) == code


def test_main_refusals_in_the_models_words() -> None:
    t = transition("answer_for_max", Surface.MAIN)
    assert t.refusal(Status.ANSWERED) == "settled"
    assert "nothing was answered on his behalf" in str(t.refusal_text("settled", "answered"))
    assert t.refusal(Status.OPEN) == "conflict"
    assert t.refusal_text("conflict", "open") == "The question is open, not with Main."
    assert transition("revoke", Surface.CARD).refusal(Status.OPEN) == "conflict"


def test_the_card_is_locked_while_main_holds_it_but_not_the_panel_or_push() -> None:
    assert Status.WITH_MAIN not in answerable(Surface.CARD)
    assert Status.WITH_MAIN in answerable(Surface.DECISION)
    assert Status.WITH_MAIN in answerable(Surface.PUSH)
    for surface in MAX_SURFACES:
        assert answerable(surface) <= UNSETTLED
        assert transition("answer", surface).target is Status.ANSWERED


def test_a_withdrawn_or_expired_card_says_so_from_every_row() -> None:
    for t in TRANSITIONS:
        assert t.refusal(Status.WITHDRAWN) == "withdrawn" or t.allows(Status.WITHDRAWN)
        assert t.refusal(Status.EXPIRED) == "expired" or t.allows(Status.EXPIRED)
    assert transition("withdraw", Surface.TOOL).idempotent
    assert transition("withdraw", Surface.TOOL).refusal(Status.ANSWERED) == "settled"


def test_settled_statuses_have_no_way_out_but_revoke_and_retract() -> None:
    for t in TRANSITIONS:
        for source in t.sources & SETTLED:
            assert (t.name, source) in {("revoke", Status.MAIN_ANSWERED),
                                        ("retract", Status.ANSWERED)}
    assert set(Status) == UNSETTLED | SETTLED and not UNSETTLED & SETTLED


def test_every_status_is_reachable_from_open() -> None:
    seen, frontier = {Status.OPEN}, [Status.OPEN]
    while frontier:
        here = frontier.pop()
        for t in TRANSITIONS:
            if here in t.sources and t.target not in seen:
                seen.add(t.target)
                frontier.append(t.target)
    assert seen == set(Status)


def test_what_the_client_draws() -> None:
    assert [s for s in Status if answerable_here(s)] == [
        Status.OPEN, Status.REVOKED, Status.HANDED_BACK]
    assert may_hand_to_main(Status.OPEN, rule=True)
    assert not may_hand_to_main(Status.OPEN, rule=False)
    assert not [s for s in Status if s is not Status.OPEN and may_hand_to_main(s, rule=True)]


def test_answers_settle_the_carrier_and_wake_the_thread() -> None:
    for t in TRANSITIONS:
        if t.target in (Status.ANSWERED, Status.MAIN_ANSWERED):
            answer = (Effect.ANSWER_MESSAGE, Effect.SETTLE_CARRIER)
            # Max's answers tell Main's thread when Main held the card (issue 31, item 4)
            assert t.effects == (*answer, Effect.TELL_MAIN) or t.effects == (
                Effect.ORIGIN_EVENT, *answer, Effect.TELL_MAX), t.key
    # Main's answer: the history row first, Max told after the carrier settled (its withdraw
    # goes first)
    assert transition("answer_for_max", Surface.MAIN).effects == (
        Effect.ORIGIN_EVENT, Effect.ANSWER_MESSAGE, Effect.SETTLE_CARRIER, Effect.TELL_MAX)
    assert transition("hand_back", Surface.MAIN).effects == (Effect.ORIGIN_EVENT,
                                                             Effect.TELL_MAX)
    assert Effect.ORIGIN_EVENT in transition("to-main", Surface.SWEEP).effects
    assert transition("revoke", Surface.CARD).clears_answer
    assert transition("revoke", Surface.PUSH).effects == transition("revoke",
                                                                    Surface.CARD).effects
    assert Effect.HANDOFF_MESSAGE in transition("to-main", Surface.SWEEP).effects
    # Max's three places to answer have one set of effects (the card's lock aside)
    assert len({transition("answer", s).effects for s in MAX_SURFACES}) == 1


def test_main_timeout_hands_back_as_main_does_and_tells_main() -> None:
    t = transition("main-timeout", Surface.SWEEP)
    assert t.sources == {Status.WITH_MAIN} and t.target is Status.HANDED_BACK
    assert t.actor is Actor.SWEEPER
    hand_back = transition("hand_back", Surface.MAIN)
    assert t.target is hand_back.target
    assert t.effects == (*hand_back.effects, Effect.TELL_MAIN)
    assert machine.MAIN_TIMEOUT_NOTE == "Main did not decide"


def test_the_fused_answer_leaves_cards_with_main_to_the_general_path() -> None:
    from maxclaw.components.answers import FUSED_EFFECTS, fused_sources
    for surface in MAX_SURFACES:
        t = transition("answer", surface)
        assert Status.WITH_MAIN.value not in fused_sources(t)
        assert set(fused_sources(t)) == {s.value for s in t.sources} - {Status.WITH_MAIN.value}
        # what the one statement does not run does nothing for its from-states
        assert set(t.effects) - set(FUSED_EFFECTS) == {Effect.TELL_MAIN}


def test_retract_takes_back_only_max_answers() -> None:
    t = transition("retract", Surface.CARD)
    assert t.sources == {Status.ANSWERED} and t.target is Status.OPEN and t.clears_answer
    assert t.effects == (Effect.WITHDRAW_ANSWER, Effect.REOPEN_CARRIER, Effect.REDUE)
    assert t.refusal(Status.MAIN_ANSWERED) == "settled"
    assert t.refusal(Status.OPEN) == "conflict"
    assert t.refusal(Status.WITHDRAWN) == "withdrawn"
    assert {"seen", "too_late"} <= set(ComponentError.MESSAGES)


def test_the_sweep_claims_what_the_table_says() -> None:
    """The claim's status is written out for the partial index; it must be the sweep rows'."""
    from maxclaw.components import sweep_store as store
    from maxclaw.db.schema import message_components
    due = [transition("to-main", Surface.SWEEP), transition("keep-open", Surface.SWEEP),
           transition("unwatched", Surface.SWEEP)]
    assert {s for t in due for s in t.sources} == {Status.OPEN}
    assert "status = 'open'" in store.CLAIM_DUE
    index = next(i for i in message_components.indexes if i.name == "message_components_due")
    assert "status = 'open'" in str(index.dialect_options["postgresql"]["where"])
    # the expiry claim and its index spell out the expire row's from-states
    listed = "status IN (" + ", ".join(
        f"'{s}'" for s in ("open", "with-main", "handed-back", "revoked")) + ")"
    assert set(transition("expire", Surface.SWEEP).sources) == UNSETTLED
    assert listed in store.CLAIM_EXPIRED
    index = next(i for i in message_components.indexes if i.name == "message_components_expiry")
    assert listed in str(index.dialect_options["postgresql"]["where"])
    # the main-timeout claim and its index spell out the main-timeout row's from-state
    assert transition("main-timeout", Surface.SWEEP).sources == {Status.WITH_MAIN}
    assert "status = 'with-main' AND main_due_at <= $1" in store.CLAIM_MAIN_TIMEOUT
    index = next(i for i in message_components.indexes
                 if i.name == "message_components_main_due")
    assert str(index.dialect_options["postgresql"]["where"]) == "status = 'with-main'"


def test_the_schema_allows_every_status() -> None:
    from maxclaw.db.schema import message_components
    check = next(c for c in message_components.constraints
                 if c.name == "message_components_status_check")
    for status in Status:
        assert f"'{status.value}'" in str(check.sqltext)  # type: ignore[attr-defined]


def test_table_rows_for_the_docs() -> None:
    rows = machine.table_rows()
    assert ("revoke", "main-answered", "revoked", "max", "card") in rows
    doc = (SRC.parents[1] / "docs" / "rich-message.md").read_text()
    for name, sources, target, actor, surface in rows:
        line = f"| `{name}` | {sources} | {target} | {actor} | {surface} |"
        assert line in doc, f"docs/rich-message.md lacks the row {line}"
