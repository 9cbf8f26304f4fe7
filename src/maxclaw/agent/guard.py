"""Forged notices: an assistant message that imitates one of the service's own notices.

(The agent-runtime issue implements the detector; until then nothing is flagged.)
"""

from __future__ import annotations


def looks_forged(text: str | None) -> bool:
    """Whether ``text`` contains something shaped like a service notice."""
    return False
