"""``maxclaw demo``, the client half: seed 004's level 4 played against a running server.

The launcher (``maxclaw.devserver``) starts an embedded PostgreSQL and the server; this module
runs two scripted agent runtimes (each bound to its own thread and workspace), then plays Max:
one card is answered while its agent is still working (the answer waits in the inbox for the
next step boundary), the other after its agent has ended the turn (the answer wakes the idle
thread).
For each card it prints the three time points — the tool returned (``posted_at``), the answer
arrived (``answered_at``), the model saw it (``seen_at``) — and how many model requests were
made while the question was open: several, where a blocking ``ask`` would allow none.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from maxclaw.client import scenario
from maxclaw.client.http import AgentClient, ApiError, UserClient
from maxclaw.client.runtime.loop import AgentRuntime
from maxclaw.client.runtime.scripted import ScriptedModel
from maxclaw.client.runtime.workspace_tools import LocalTools
from maxclaw.wire.models import Component

Say = Callable[[str], None]
TIMEOUT_S = 120.0


@dataclass
class Card:
    """One scenario: a thread, its runtime, and how Max answers."""

    label: str
    choice: str  # "keep" or "drop"
    when: str  # "early": answer_after_s after posting; "late": after the turn ended
    plan_change: bool = False  # the agent supersedes its question and withdraws another
    thread_id: str = ""
    component_id: str = ""
    runtime: AgentRuntime | None = None
    workspace: Path | None = None



async def _until(check: Callable[[], Any], what: str, timeout_s: float = TIMEOUT_S) -> Any:
    """Poll ``check`` (a coroutine function) until it returns something truthy."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = await check()
        if value:
            return value
        await asyncio.sleep(0.05)
    raise TimeoutError(f"the demo gave up waiting for {what}")


async def _play_max(user: UserClient, card: Card, answer_after_s: float) -> None:
    """Wait for the card, then answer it early (mid-turn) or late (after the turn ended)."""

    async def posted() -> bool:
        async def components() -> list[str]:
            for message in await user.messages(card.thread_id):
                for component in message.components or []:
                    return [str(component["id"])]
            return []
        found = await components()
        if not found:
            return False
        # the card is drawn from the assistant row as soon as it is posted; its component
        # exists once the runtime has executed the call (a loaded machine widens that gap)
        try:
            await user.component(found[0])
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise
        card.component_id = found[0]
        return True

    await _until(posted, f"the card of {card.label}")
    if card.when == "late":
        async def idle() -> bool:
            return (await user.thread(card.thread_id)).turn_state == "idle"
        await _until(idle, f"the end of the first turn of {card.label}")
        # the card open now (the agent may have superseded the first one)
        card.component_id = (await _cards(user, card.thread_id))["open"][0]
    await asyncio.sleep(answer_after_s)
    await user.answer(card.component_id, [card.choice])


async def _cards(user: UserClient, thread_id: str) -> dict[str, list[str]]:
    """The thread's component ids by status, in posting order, and a line per withdrawal."""
    out: dict[str, list[str]] = {"open": [], "withdrawn": []}
    for message in await user.messages(thread_id):
        for definition in message.components or []:
            component = await user.component(str(definition["id"]))
            out.setdefault(component.status, []).append(component.id)
            if component.status == "withdrawn":
                why = (f"superseded by card {component.superseded_by}"
                       if component.superseded_by else f"\"{component.withdrawn_reason}\"")
                out.setdefault("why", []).append(f"{component.id}: {why}")
    return out


async def _settled(user: UserClient, card: Card) -> bool:
    component = await user.component(card.component_id) if card.component_id else None
    if component is None or component.seen_at is None:
        return False
    return (await user.thread(card.thread_id)).turn_state == "idle"


def _report(card: Card, component: Component, say: Say, withdrawn: list[str]) -> None:
    assert card.runtime is not None
    assert card.workspace is not None
    # the demo reports only a card answered and seen (``_settled``): all three are set
    assert component.posted_at and component.answered_at and component.seen_at, component
    posted, arrived, seen = component.posted_at, component.answered_at, component.seen_at
    requests = [e for e in card.runtime.events if e.kind == "model_request"]
    start = next(e.at for e in card.runtime.events if e.kind == "claim")
    while_open = sum(1 for e in requests if posted < e.at < arrived)

    def rel(t: datetime) -> str:
        return f"+{(t - start).total_seconds():6.2f} s"

    result = (scenario.ORDERS_KEEP, "status kept as a deprecated alias") \
        if (card.workspace / "orders.py").read_text() == scenario.ORDERS_KEEP \
        else (scenario.ORDERS_DROP, "status removed (breaking change)")
    label = "Keep one version" if card.choice == "keep" else "Remove it now"
    say(f"\n{card.label}: card {card.component_id}")
    say(f"  1. tool returned   {rel(posted)}   posted_at: ask_user_question answered at once")
    say(f"  2. answer arrived  {rel(arrived)}   answered_at: Max chose \"{label}\"")
    say(f"  3. model saw it    {rel(seen)}   seen_at: "
        + ("at the next step boundary of the running turn" if card.when == "early"
           else "in the new turn the answer woke"))
    say(f"  model requests while the question was open: {while_open}"
        "   (a blocking ask: 0)")
    say(f"  model requests in all: {len(requests)}; result: orders.py — {result[1]}")
    for line in withdrawn:
        say(f"  the plan changed, so the agent withdrew card {line}")


MintAgentToken = Callable[[str], Awaitable[str]]


async def play(base: str, user_token: str, mint_agent_token: MintAgentToken, base_dir: Path,
               step_delay_s: float, answer_after_s: float, say: Say) -> None:
    """Two scripted runtimes against the server at ``base``; Max is played through ``user_token``.

    ``mint_agent_token(thread_id)`` returns an agent token bound to that thread (the launcher
    owns the server, so it mints; this side only speaks HTTP)."""
    user = UserClient(base, user_token)
    cards = [Card("Card 1 (answered while the agent works)", "drop", "early"),
             Card("Card 2 (answered after the agent ended its turn; its plan changed on the "
                  "way)", "keep", "late", plan_change=True)]
    stop = asyncio.Event()
    loops: list[asyncio.Task[None]] = []
    try:
        for i, card in enumerate(cards, 1):
            card.thread_id = (await user.create_thread(f"Order service #{i}")).id
            card.workspace = base_dir / f"workspace-{i}"
            scenario.write_fixture(card.workspace)
            token = await mint_agent_token(card.thread_id)
            card.runtime = AgentRuntime(AgentClient(base, token),
                                        ScriptedModel(scenario.level4_script(
                                            step_delay_s, plan_change=card.plan_change)),
                                        LocalTools(card.workspace), runtime_id=f"demo-{i}")
            loops.append(asyncio.create_task(card.runtime.run_forever(stop, wait_s=5)))
        say(f"agents        2 scripted runtimes, {step_delay_s:g} s per model request")
        say(f"task          {scenario.TASK}")
        for card in cards:
            await user.post_message(card.thread_id, scenario.TASK)
        await asyncio.gather(*(_play_max(user, c, answer_after_s) for c in cards))
        for card in cards:
            await _until(lambda c=card: _settled(user, c), f"{card.label} to finish")  # type: ignore[misc]
            _report(card, await user.component(card.component_id), say,
                    (await _cards(user, card.thread_id)).get("why", []))
    finally:
        stop.set()
        for task in loops:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for card in cards:
            if card.runtime is not None:
                await card.runtime.aclose()
                await card.runtime.client.aclose()
        await user.aclose()
