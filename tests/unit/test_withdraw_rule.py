"""The withdraw rule is written once: ``push.store.WITHDRAW``. The fused answer
(``components.store.ANSWER_SETTLE``) runs it inside its own statement, and statements are
written out whole, so it holds the same text with its own parameters; this test keeps the two
from drifting apart (a change to one without the other fails here)."""

from __future__ import annotations

import re

from maxclaw.components.store import ANSWER_SETTLE
from maxclaw.push.store import WITHDRAW

# WITHDRAW's parameters as ANSWER_SETTLE spells them: the user, the carrier it just settled,
# the withdraw's collapse id and payload
IN_ANSWER = {"1": "$1::uuid", "2": "(SELECT s.id FROM settled AS s)", "3": "$14",
             "4": "$13::jsonb"}


def _words(sql: str) -> str:
    return " ".join(sql.split())


def _rule(statement: str) -> str:
    """The rule's CTEs: from ``cancelled AS (`` to the end of ``queued``."""
    start = statement.index("cancelled AS (")
    end = statement.index("RETURNING id\n)", start) + len("RETURNING id\n)")
    return statement[start:end]


def test_the_answer_runs_the_withdraw_rule_word_for_word() -> None:
    rule = re.sub(r"\$(\d+)\b", lambda m: IN_ANSWER[m.group(1)], _rule(WITHDRAW))
    assert _words(rule) == _words(_rule(ANSWER_SETTLE))


def test_the_check_sees_a_difference() -> None:
    changed = WITHDRAW.replace("o.attempts = 0 OR", "o.attempts = 1 OR")
    rule = re.sub(r"\$(\d+)\b", lambda m: IN_ANSWER[m.group(1)], _rule(changed))
    assert _words(rule) != _words(_rule(ANSWER_SETTLE))
