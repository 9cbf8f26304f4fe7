"""Issue 31, items 3 and 4, on real PostgreSQL with a moved clock.

Item 3, "never locked for ever": a card with Main whose time to decide is up (his
``main_timeout_minutes``, else ``MAXCLAW_MAIN_TIMEOUT_MINUTES``) goes back to Max through the
``main-timeout`` row: handed back with the note "Main did not decide", pushed to him once
(decrypted as a browser would), told to Main's thread without waking it; four sweepers racing
over the same cards hand each back once with one push.

Item 4, "Main is told": Max's answer to a card Main holds — from the panel or a push (the card
itself is locked) — writes one non-waking event in Main's thread, and Main's later answer is
refused ``409 settled``.
"""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from maxclaw.cards.text import MAIN_TIMED_OUT_PREFIX, MAX_ANSWERED_PREFIX
from maxclaw.components.machine import MAIN_TIMEOUT_NOTE
from tests.cards import CHOICE, new_thread, post_card
from tests.conftest import Actor, Harness
from tests.integration.push_fakes import Endpoint
from tests.integration.test_main_handoff import main_tool
from tests.integration.test_push_action_tokens import act, ask, push, register
from tests.integration.test_quiet_hours import NIGHT, pushed, quiet, webhook

__all__ = ["push", "quiet"]  # the fixtures, imported for this module's tests

QUESTION = CHOICE["question"]
T0 = datetime(2027, 6, 1, 9, 0, tzinfo=UTC)


class Moved:
    """The one clock every service reads, set by hand."""

    def __init__(self, at: datetime) -> None:
        self.at = at

    def now(self) -> datetime:
        return self.at


def move(h: Harness, monkeypatch: pytest.MonkeyPatch, at: datetime) -> Moved:
    clock = Moved(at)
    monkeypatch.setattr(h.services.clock, "now", clock.now)  # shared by every service
    return clock


async def rows(h: Harness, sql: str, *args: Any) -> list[dict[str, Any]]:
    async with h.services.db.connection() as conn:
        return [dict(r) for r in await conn.fetch(sql, *args)]


async def to_main(a: Actor, cid: str) -> None:
    resp = await a.user.post(f"/v1/components/{cid}/to-main")
    assert resp.status_code == 200, resp.text


async def main_due_at(h: Harness, a: Actor, cid: str) -> datetime | None:
    [row] = await rows(h, "SELECT main_due_at FROM message_components"
                          " WHERE user_id = $1::uuid AND id = $2", a.user_id, cid)
    due: datetime | None = row["main_due_at"]
    return due


async def main_events(h: Harness, a: Actor) -> list[dict[str, Any]]:
    """The event rows of his Main thread (the hand-off itself is a ``user`` row)."""
    return await rows(h, "SELECT id, body, source_meta, delivered_at IS NOT NULL AS history"
                         " FROM messages WHERE user_id = $1::uuid"
                         " AND thread_id = $2::uuid AND role = 'event' ORDER BY id",
                      a.user_id, a.main_thread_id)


async def main_turns(h: Harness, a: Actor) -> int:
    return len(await rows(h, "SELECT id FROM turns WHERE thread_id = $1::uuid",
                          a.main_thread_id))


async def finish_main_turns(h: Harness, a: Actor) -> None:
    """Close the turn the hand-off queued, so that anything waking Main would queue another."""
    async with h.services.db.connection() as conn:
        await conn.execute("UPDATE turns SET status = 'done', finished_at = now()"
                           " WHERE thread_id = $1::uuid AND status IN ('queued', 'running')",
                           a.main_thread_id)


async def settings(a: Actor, **fields: Any) -> dict[str, Any]:
    resp = await a.user.patch("/v1/settings", json=fields)
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


async def test_the_timeout_hands_back_with_the_note_pushes_once_and_tells_main(
        push: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = move(push, monkeypatch, T0)
    a = await push.actor("max")
    sweep = push.services.components.sweep_main_timeout
    async with Endpoint() as endpoint:
        phone = await register(a, endpoint, "phone")
        tid, cid = await ask(push, a)
        await to_main(a, cid)
        assert await main_due_at(push, a, cid) == T0 + timedelta(minutes=30)  # the default
        await push.services.push.dispatcher.run_until_idle()
        pushed = len(phone.payloads())
        await finish_main_turns(push, a)
        turns = await main_turns(push, a)
        # a minute early: nothing moves
        clock.at = T0 + timedelta(minutes=29)
        assert await sweep() == 0
        assert (await a.user.get(f"/v1/components/{cid}")).json()["status"] == "with-main"
        clock.at = T0 + timedelta(minutes=30)
        assert await sweep() == 1
        assert await sweep() == 0  # once
        await push.services.push.dispatcher.run_until_idle()
        payloads = phone.payloads()[pushed:]
    component = (await a.user.get(f"/v1/components/{cid}")).json()
    assert component["status"] == "handed-back" and component["main_reason"] == MAIN_TIMEOUT_NOTE
    assert await main_due_at(push, a, cid) is None
    audit = await rows(push, "SELECT from_status, to_status, actor FROM component_audit"
                             " WHERE component_id = $1 ORDER BY id", cid)
    assert audit[-1] == {"from_status": "with-main", "to_status": "handed-back",
                         "actor": "sweeper"}
    # Max gets the question again with the note, once, exactly as when Main hands back
    [again] = [p for p in payloads if p.get("main_note")]
    assert again["main_note"] == MAIN_TIMEOUT_NOTE and again["kind"] == "agent-question"
    assert again["body"] == f"Main handed this back to you: {MAIN_TIMEOUT_NOTE}\n{QUESTION}"
    # Main's thread is told, without waking it
    [told] = await main_events(push, a)
    assert told["body"].startswith(f'{MAIN_TIMED_OUT_PREFIX}: "{CHOICE_TITLE}"')
    assert f'"{MAIN_TIMEOUT_NOTE}"' in told["body"]
    assert told["source_meta"]["askHandoff"] == {"componentId": cid, "threadId": tid,
                                                 "phase": "handed-back"}
    assert await main_turns(push, a) == turns
    assert told["history"]  # Main is idle: history for its next turn, not input waiting
    # the asking thread's history row, as after Main's own hand-back
    events = await rows(push, "SELECT source_meta FROM messages WHERE thread_id = $1::uuid"
                              " AND role = 'event' ORDER BY id", tid)
    assert [e["source_meta"]["askHandoff"]["phase"] for e in events] == ["with-main",
                                                                          "handed-back"]
    # Main, late: refused, nothing written; Max answers with the pushed question's button
    late = await main_tool(a, "hand_back", {"component_id": cid})
    assert late.status_code == 409 and late.json()["code"] == "conflict"
    resp = await act(push, {"action_token": again["action_token"], "action": "opt:keep"})
    assert resp.status_code == 200, resp.text
    assert (await a.user.get(f"/v1/components/{cid}")).json()["status"] == "answered"


CHOICE_TITLE = "Rename the status field"


async def test_four_sweepers_racing_hand_each_card_back_once_with_one_push(
        push: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = move(push, monkeypatch, T0)
    people = [await push.actor("max"), await push.actor("ann")]
    async with AsyncExitStack() as stack:  # one push endpoint each (a phone reads its own)
        phones = {a.user_id: await register(a, await stack.enter_async_context(Endpoint()),
                                            a.name) for a in people}
        cards: list[tuple[Actor, str]] = []
        for a in people:
            for _ in range(6):
                _, cid = await ask(push, a)
                await to_main(a, cid)
                cards.append((a, cid))
        await push.services.push.dispatcher.run_until_idle()
        before = {u: len(p.payloads()) for u, p in phones.items()}
        clock.at = T0 + timedelta(minutes=31)

        async def sweeper() -> int:
            moved = 0
            while n := await push.services.components.sweep_main_timeout(limit=3):
                moved += n
            return moved

        counts = await asyncio.gather(*[sweeper() for _ in range(4)])
        assert sum(counts) == len(cards)
        await push.services.push.dispatcher.run_until_idle()
        notes = {u: [p for p in phones[u].payloads()[before[u]:] if p.get("main_note")]
                 for u in phones}
    for a, cid in cards:
        assert (await a.user.get(f"/v1/components/{cid}")).json()["status"] == "handed-back"
        audit = await rows(push, "SELECT actor FROM component_audit WHERE user_id = $1::uuid"
                                 " AND component_id = $2 AND to_status = 'handed-back'",
                           a.user_id, cid)
        assert audit == [{"actor": "sweeper"}], cid
        assert [p["component_id"] for p in notes[a.user_id]].count(cid) == 1, cid
        told = [e for e in await main_events(push, a)
                if e["source_meta"]["askHandoff"]["componentId"] == cid]
        assert len(told) == 1, cid
        # the hand-off's turn is still queued: the event is input it reads (its inbox), and
        # no second turn was queued for it
        assert not told[0]["history"], cid
    for a in people:
        active = await rows(push, "SELECT id FROM turns WHERE thread_id = $1::uuid"
                                  " AND status IN ('queued', 'running')", a.main_thread_id)
        assert len(active) == 1
    assert sum(len(n) for n in notes.values()) == len(cards)


async def test_his_setting_changes_the_moment(push: Harness,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    clock = move(push, monkeypatch, T0)
    a = await push.actor("max")
    sweep = push.services.components.sweep_main_timeout
    assert (await a.user.get("/v1/settings")).json()["main_timeout_minutes"] is None
    assert (await settings(a, main_timeout_minutes=5))["main_timeout_minutes"] == 5
    _, first = await ask(push, a)
    await to_main(a, first)
    assert await main_due_at(push, a, first) == T0 + timedelta(minutes=5)
    clock.at = T0 + timedelta(minutes=4)
    assert await sweep() == 0
    clock.at = T0 + timedelta(minutes=5)
    assert await sweep() == 1
    # a card Main holds when he changes the setting: its moment moves by the change
    clock.at = t1 = T0 + timedelta(hours=1)
    _, second = await ask(push, a)
    await to_main(a, second)
    await settings(a, main_timeout_minutes=60)
    assert await main_due_at(push, a, second) == t1 + timedelta(minutes=60)
    clock.at = t1 + timedelta(minutes=59)
    assert await sweep() == 0
    # null: the server's default again (30), counted from the hand-off
    await settings(a, main_timeout_minutes=None)
    assert await main_due_at(push, a, second) == t1 + timedelta(minutes=30)
    assert await sweep() == 1
    # the due sweep's hand-off follows it too: due at t2, Main's time from then
    await settings(a, main_timeout_minutes=10)
    clock.at = t2 = t1 + timedelta(hours=2)
    tid = await new_thread(a.user)
    _, content = await post_card(a.agent, tid, CHOICE, main_after_minutes=0)
    third = content["components"][0]["id"]
    result = await push.services.components.sweep_due()
    assert result["handed_to_main"] == 1
    assert await main_due_at(push, a, third) == t2 + timedelta(minutes=10)


async def test_the_setting_is_refused_by_field(push: Harness) -> None:
    a = await push.actor("max")
    for bad in (0, 10081, -5, "30", True, 1.5, [30]):
        resp = await a.user.patch("/v1/settings", json={"main_timeout_minutes": bad})
        assert resp.status_code == 422, (bad, resp.text)
        assert resp.json()["code"] == "invalid"
        assert resp.json()["data"]["errors"][0]["loc"] == ["body", "main_timeout_minutes"], bad
    assert (await a.user.get("/v1/settings")).json()["main_timeout_minutes"] is None
    for good in (1, 10080, None):
        assert (await settings(a, main_timeout_minutes=good))["main_timeout_minutes"] == good


async def test_max_answering_a_card_main_holds_tells_main_once_from_each_surface(
        push: Harness) -> None:
    a = await push.actor("max")
    async with Endpoint() as endpoint:
        phone = await register(a, endpoint, "phone")
        cards = {}
        for surface in ("card", "whole-card", "panel", "push"):
            tid, cid = await ask(push, a)
            cards[surface] = (tid, cid, phone.payloads()[-1])
            await to_main(a, cid)
    await finish_main_turns(push, a)
    turns = await main_turns(push, a)

    async def told(cid: str) -> list[dict[str, Any]]:
        return [e for e in await main_events(push, a)
                if e["source_meta"]["askHandoff"]["componentId"] == cid]

    # the card itself is locked while Main holds it: refused, Main told nothing
    _, cid, _ = cards["card"]
    resp = await a.user.post(f"/v1/components/{cid}/answer", json={"selected": ["keep"]})
    assert resp.status_code == 409 and resp.json()["code"] == "locked"
    _, cid, _ = cards["whole-card"]
    call_id, question = cid.rsplit(":", 1)
    resp = await a.user.post(f"/v1/cards/{call_id}/answer",
                             json={"answers": {question: {"selected": ["keep"]}}})
    assert resp.status_code == 200, resp.text
    assert resp.json()["components"][cid]["error"]["code"] == "locked"
    assert await told(cards["card"][1]) == [] and await told(cid) == []
    # the panel (a plain answer: it leaves the one-statement path) and a push button
    _, cid, _ = cards["panel"]
    decision_id = (await a.user.get(f"/v1/components/{cid}")).json()["decision_id"]
    resp = await a.user.post(f"/v1/decisions/{decision_id}/settle", json={"selected": ["keep"]})
    assert resp.status_code == 200, resp.text
    _, cid, payload = cards["push"]
    resp = await act(push, {"action_token": payload["action_token"], "action": "opt:keep"})
    assert resp.status_code == 200, resp.text
    for surface, via in (("panel", "decision"), ("push", "push")):
        tid, cid, _ = cards[surface]
        component = (await a.user.get(f"/v1/components/{cid}")).json()
        assert (component["status"], component["answered_via"]) == ("answered", via)
        [event] = await told(cid)
        assert event["body"].startswith(f'{MAX_ANSWERED_PREFIX}: "{CHOICE_TITLE}"')
        assert event["source_meta"]["askHandoff"] == {"componentId": cid, "threadId": tid,
                                                      "phase": "answered"}
        # Main, mid-turn on the stale hand-off: refused, and nothing more is written
        late = await main_tool(a, "answer_for_max", {"component_id": cid,
                                                     "selected": ["drop"], "reason": "usual"})
        assert late.status_code == 409 and late.json()["code"] == "settled", late.text
        assert len(await told(cid)) == 1
    assert await main_turns(push, a) == turns  # no event woke Main


async def test_the_timeout_push_follows_his_quiet_hours(
        quiet: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """Handed to Main at 22:10 UTC with quiet hours 22:30-07:30: Main's time runs out at 22:40,
    inside the window, and the hand-back push goes out passive and silent (as every push in
    the window), where the question itself, asked at 22:00, went out active."""
    clock = move(quiet, monkeypatch, datetime(2027, 6, 1, 22, 0, tzinfo=UTC))
    a = await quiet.actor("max")
    await settings(a, quiet_hours=NIGHT)
    async with Endpoint() as endpoint:
        await webhook(a, endpoint)
        tid = await new_thread(a.user)
        _, content = await post_card(a.agent, tid, CHOICE)
        cid = content["components"][0]["id"]
        await quiet.services.push.dispatcher.run_until_idle()
        clock.at = datetime(2027, 6, 1, 22, 10, tzinfo=UTC)
        await to_main(a, cid)
        clock.at = datetime(2027, 6, 1, 22, 40, tzinfo=UTC)
        assert await quiet.services.components.sweep_main_timeout() == 1
        await quiet.services.push.dispatcher.run_until_idle()
        sent = pushed(endpoint)
    [question] = [p for p in sent if not p.get("main_note")]
    [again] = [p for p in sent if p.get("main_note")]
    assert question["interruption_level"] == "active"
    assert again["main_note"] == MAIN_TIMEOUT_NOTE
    assert again["interruption_level"] == "passive" and again["silent"] is True
