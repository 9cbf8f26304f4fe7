"""Forged notices: an assistant message that imitates one of the service's own notices.

A model that has read an answer message or a background-job report can continue the pattern
and write one itself (seed 004: the model wrote a ``<background_job_done …>`` block with
invented test output, then declared the work done, ten seconds before the real job ended).
The service writes its notices itself, with ``source_meta``; so an *assistant* message that
contains text shaped like one is flagged ``source_meta.guard = "forged"`` by the messages
endpoint, and the next inbox delivery tells the model that the text did not come from the
service (``maxclaw.turns.history.FORGED_NOTICE``).

The shapes are those of ``maxclaw.cards.text`` (answer messages, hand-offs, revokes),
the ``[MaxClaw event]`` prefix every event row carries in the model's history, and the
runtime's background-job reports. They match the structure (the fixed wording around a card
id), not loose words, so a model that merely talks *about* an answer is not flagged.
"""

from __future__ import annotations

import re

from maxclaw.cards import text as notices

# Linear time. The text is a model's (up to the body limit, 200 KB); an unbounded ``".*?"``
# retried from each of thousands of starts was quadratic (60 KB of 'Answer to "' held the event
# loop for 1.9 s). Every repetition here is bounded and possessive (no backtracking), and the
# span one start scans (a quoted title, a card id) cannot contain another start (a title ends
# at its closing quote, a card id at a space or parenthesis), so the scans of all starts
# together cover the text a bounded number of times. The bounds cover what the service writes:
# a card title is at most 200 characters, a thread title 500, a component id 265.
_TITLE = r'"[^"]{0,600}+"'
_CARD = r"\(question card (?=[^\s()]{0,300}:)[^\s()]{1,600}+"
# Matched against the lower-cased text (one pass), so no pattern needs IGNORECASE: an
# IGNORECASE literal cannot use the fast substring search and cost ~25 ms per 200 KB each.
_PATTERNS = [
    # answer_message_text: 'Answer to "<title>" (question card <id> in a message above)'
    re.compile(re.escape(notices.ANSWER_PREFIX.lower()) + r"\s{1,10}+" + _TITLE
               + r"\s{1,10}+" + _CARD),
    re.compile(_CARD + r"\s{1,10}+in a message above\)"),
    re.compile(re.escape(notices.MAIN_ANSWER_PREFIX.lower())),
    # handoff_text: 'Hand-off from thread "<title>" (<thread id>): Max has not answered …'
    re.compile(re.escape(notices.HANDOFF_PREFIX.lower()) + r"\s{1,10}+thread\s{1,10}+" + _TITLE
               + r"\s{1,10}+\("),
    re.compile(r"max has not answered the question card"),
    # revoke_text: 'Max revoked Main's answer to "<title>" (question card <id>)'
    re.compile(re.escape(notices.REVOKE_PREFIX.lower())),
    # every event row in the model's history, and the runtime's background-job reports
    re.compile(r"\[\s{0,10}+maxclaw event\s{0,10}+\]"),
    re.compile(r"<\s{0,10}+/?\s{0,10}+background_job_done\b"),
    # the service's jobLost event (leases.rows.LostJob.body): "… was lost: its runtime (…"
    re.compile(r"was lost:\s{1,10}+its runtime\s{1,10}+\("),
]


def forged_pattern(text: str | None) -> str | None:
    """The first service-notice shape found in ``text`` (for logs and tests), or None."""
    if not text:
        return None
    lowered = text.lower()
    for pattern in _PATTERNS:
        if pattern.search(lowered):
            return pattern.pattern
    return None


def looks_forged(text: str | None) -> bool:
    """Whether ``text`` contains something shaped like a service notice."""
    return forged_pattern(text) is not None
