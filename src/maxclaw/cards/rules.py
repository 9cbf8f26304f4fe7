"""Rules of the hand-off and of tool offering, as pure functions (each has its own test)."""

from __future__ import annotations

from dataclasses import dataclass

from maxclaw.cards.definitions import Card

# Main's tools: deciding for Max, and reading what it decides about (issue 31)
MAIN_TOOLS = frozenset({"answer_for_max", "hand_back", "read_thread", "list_open_questions"})
ASK_TOOL = "ask_user_question"
WITHDRAW_TOOL = "withdraw_question"  # offered wherever ASK_TOOL is


@dataclass(frozen=True, slots=True)
class ThreadFacts:
    """What the hand-off rule and a card's carrier read of the card's thread."""

    id: str
    kind: str
    category: str | None
    title: str


def main_may_take(card: Card, thread: ThreadFacts) -> bool:
    """Whether Main may be handed this card (``domain.md``: "Where Main may take a card").

    Irreversible cards are handed over (so Main knows) but ``answer_for_max`` refuses them.
    """
    if any(c.kind in ("object", "secret") for c in card.components):
        return False  # "apply this diff?" is his call; a secret only he knows
    if thread.kind in ("main", "isolated"):
        return False
    return thread.category is None


def tools_offered(thread_kind: str) -> list[str]:
    """Which service tools a thread's agent may call."""
    tools = [] if thread_kind == "background" else [ASK_TOOL, WITHDRAW_TOOL]
    if thread_kind == "main":
        tools += sorted(MAIN_TOOLS)
    return tools
