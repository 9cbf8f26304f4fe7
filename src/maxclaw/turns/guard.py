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

_CARD = r"\(question card [^\s()]+:[^\s()]+"
_PATTERNS = [
    # answer_message_text: 'Answer to "<title>" (question card <id> in a message above)'
    re.compile(re.escape(notices.ANSWER_PREFIX) + r'\s+".*?"\s+' + _CARD, re.DOTALL),
    re.compile(_CARD + r"\s+in a message above\)"),
    re.compile(re.escape(notices.MAIN_ANSWER_PREFIX), re.IGNORECASE),
    # handoff_text: 'Hand-off from thread "<title>" (<thread id>): Max has not answered …'
    re.compile(re.escape(notices.HANDOFF_PREFIX) + r'\s+thread\s+".*?"\s+\(', re.DOTALL),
    re.compile(r"Max has not answered the question card", re.IGNORECASE),
    # revoke_text: 'Max revoked Main's answer to "<title>" (question card <id>)'
    re.compile(re.escape(notices.REVOKE_PREFIX), re.IGNORECASE),
    # every event row in the model's history, and the runtime's background-job reports
    re.compile(r"\[\s*MaxClaw event\s*\]", re.IGNORECASE),
    re.compile(r"<\s*/?\s*background_job_done\b", re.IGNORECASE),
]


def forged_pattern(text: str | None) -> str | None:
    """The first service-notice shape found in ``text`` (for logs and tests), or None."""
    if not text:
        return None
    for pattern in _PATTERNS:
        if pattern.search(text):
            return pattern.pattern
    return None


def looks_forged(text: str | None) -> bool:
    """Whether ``text`` contains something shaped like a service notice."""
    return forged_pattern(text) is not None
