"""Main hand-off: main_may_take, every transition of the state machine, the sweeper, revoke."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from tests.cards import CHOICE, OBJECT, SECRET, TEXT, execute, new_thread, post_call, post_card
from tests.conftest import Actor, Harness
from tests.locks import hold_after, until_done_or_waiting, wait_for_lock_waiters


async def component(a: Actor, cid: str) -> dict[str, Any]:
    return dict((await a.user.get(f"/v1/components/{cid}")).json())


async def thread_messages(a: Actor, tid: str) -> list[dict[str, Any]]:
    return list((await a.user.get(f"/v1/threads/{tid}/messages?limit=500")).json()["messages"])


async def main_tool(a: Actor, name: str, args: dict[str, Any]) -> Any:
    call_id = await post_call(a.agent, a.main_thread_id, name, args)
    return await execute(a.agent, a.main_thread_id, call_id)


async def card_with_main(a: Actor, *questions: dict[str, Any], **card: Any) -> tuple[str, str]:
    tid = await new_thread(a.user)
    _, content = await post_card(a.agent, tid, *(questions or (CHOICE,)), **card)
    cid = content["components"][0]["id"]
    resp = await a.user.post(f"/v1/components/{cid}/to-main")
    assert resp.status_code == 200, resp.text
    assert resp.json()["status"] == "with-main"
    return tid, cid


# ----- main_may_take, one rule each -----

@pytest.mark.parametrize(("questions", "thread"), [
    ((OBJECT,), {}),
    ((SECRET,), {}),
    ((CHOICE, SECRET), {}),
    ((CHOICE,), {"kind": "isolated"}),
    ((CHOICE,), {"category": "finance"}),
])
async def test_main_may_not_take(harness: Harness, questions: tuple[dict[str, Any], ...],
                                 thread: dict[str, Any]) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a.user, **thread)
    _, content = await post_card(a.agent, tid, *questions)
    cid = content["components"][0]["id"]
    resp = await a.user.post(f"/v1/components/{cid}/to-main")
    assert resp.status_code == 409 and resp.json()["code"] == "not_transferable"
    assert (await component(a, cid))["status"] == "open"


async def test_main_may_not_take_cards_of_its_own_thread(harness: Harness) -> None:
    a = await harness.actor("max")
    _, content = await post_card(a.agent, a.main_thread_id, CHOICE)
    resp = await a.user.post(f"/v1/components/{content['components'][0]['id']}/to-main")
    assert resp.status_code == 409 and resp.json()["code"] == "not_transferable"


async def test_main_thread_cards_raise_the_nudge_bar(harness: Harness) -> None:
    a = await harness.actor("max")
    await post_card(a.agent, a.main_thread_id, CHOICE)
    tid = await new_thread(a.user)
    await post_card(a.agent, tid, CHOICE)
    decisions = (await a.user.get("/v1/decisions")).json()["decisions"]
    assert sorted(d["bar"] for d in decisions) == [False, True]
    main_decision = next(d for d in decisions if d["bar"])
    snoozed = await a.user.post(f"/v1/decisions/{main_decision['id']}/snooze",
                                json={"minutes": 30})
    assert snoozed.status_code == 200 and snoozed.json()["bar_snoozed_until"] is not None
    bad = await a.user.post(f"/v1/decisions/{main_decision['id']}/snooze", json={"minutes": 0})
    assert bad.status_code == 422


# ----- transitions -----

async def test_to_main_posts_a_handoff_and_wakes_main(harness: Harness) -> None:
    a = await harness.actor("max")
    tid, cid = await card_with_main(a, CHOICE)
    handoffs = [m for m in await thread_messages(a, a.main_thread_id)
                if (m["source_meta"] or {}).get("askHandoff")]
    assert len(handoffs) == 1
    meta = handoffs[0]["source_meta"]["askHandoff"]
    assert meta == {"componentId": cid, "threadId": tid, "phase": "with-main",
                    # what the WebUI draws the hand-off chip from (fields may only be added)
                    "title": "Rename the status field",
                    "question": "Keep the old field for one version?"}
    body = handoffs[0]["body"]
    for needle in (cid, "Keep one version", "answer_for_max", "hand_back", "Stakes: normal"):
        assert needle in body
    main = (await a.user.get(f"/v1/threads/{a.main_thread_id}")).json()
    assert main["turn_state"] == "queued"
    again = await a.user.post(f"/v1/components/{cid}/to-main")
    assert again.status_code == 409 and again.json()["code"] == "conflict"


async def test_with_main_locks_the_card_but_not_panel_or_push(harness: Harness) -> None:
    a = await harness.actor("max")
    _, cid = await card_with_main(a, CHOICE)
    locked = await a.user.post(f"/v1/components/{cid}/answer", json={"selected": ["keep"]})
    assert locked.status_code == 409 and locked.json()["code"] == "locked"
    decision_id = (await component(a, cid))["decision_id"]
    settled = await a.user.post(f"/v1/decisions/{decision_id}/settle", json={"selected": ["keep"]})
    assert settled.status_code == 200, settled.text
    assert settled.json()["status"] == "settled" and settled.json()["settled_via"] == "decision"
    got = await component(a, cid)
    assert (got["status"], got["answered_by"], got["answered_via"]) == (
        "answered", "max", "decision")
    late = await main_tool(a, "answer_for_max", {"component_id": cid, "selected": ["drop"],
                                                 "reason": "it is simpler"})
    assert late.status_code == 409 and late.json()["code"] == "settled"
    assert late.json()["content"] == {
        "answered": False,
        "error": "Max already answered this question elsewhere; nothing was answered on his "
                 "behalf"}


async def test_main_answers_on_his_behalf(harness: Harness) -> None:
    a = await harness.actor("max")
    tid, cid = await card_with_main(a, CHOICE)
    resp = await main_tool(a, "answer_for_max", {"component_id": cid, "selected": ["keep"],
                                                 "reason": "safer for clients"})
    assert resp.status_code == 200, resp.text
    assert resp.json()["content"] == {"answered": True, "component_id": cid}
    got = await component(a, cid)
    assert (got["status"], got["answered_by"], got["answered_via"], got["main_reason"]) == (
        "main-answered", "main", "main", "safer for clients")
    tool = next(m for m in await thread_messages(a, tid) if m["role"] == "tool")
    assert "safer for clients" not in str(tool["display"])
    answers = [m for m in await thread_messages(a, tid) if m["role"] == "user"]
    assert len(answers) == 1
    assert answers[0]["source_meta"]["componentAnswer"] == {
        "componentId": cid, "answeredBy": "main", "via": "main",
        # what the WebUI draws the answer chip from (fields may only be added)
        "title": "Rename the status field", "question": "Keep the old field for one version?",
        "labels": ["Keep one version"], "note": None}
    assert "on Max's behalf" in answers[0]["body"] and "Keep one version" in answers[0]["body"]
    decision = (await a.user.get("/v1/decisions?status=all")).json()["decisions"][0]
    assert (decision["status"], decision["settled_via"]) == ("settled", "main")


async def test_answer_for_max_needs_a_reason(harness: Harness) -> None:
    a = await harness.actor("max")
    _, cid = await card_with_main(a, CHOICE)
    resp = await main_tool(a, "answer_for_max", {"component_id": cid, "selected": ["keep"]})
    assert resp.status_code == 422 and resp.json()["content"]["answered"] is False
    assert (await component(a, cid))["status"] == "with-main"


async def test_irreversible_is_handed_over_but_only_handed_back(harness: Harness) -> None:
    a = await harness.actor("max")
    tid, cid = await card_with_main(a, CHOICE, stakes="irreversible")
    handoff = next(m for m in await thread_messages(a, a.main_thread_id) if m["role"] == "user")
    assert "irreversible" in handoff["body"]
    refused = await main_tool(a, "answer_for_max", {"component_id": cid, "selected": ["keep"],
                                                    "reason": "r"})
    assert refused.status_code == 409 and refused.json()["code"] == "irreversible"
    assert refused.json()["content"]["error"] == (
        "Guessing wrong here cannot be undone; it can't be answered on his behalf. Hand it back.")
    back = await main_tool(a, "hand_back", {"component_id": cid, "note": " yours "})
    assert back.status_code == 200
    assert back.json()["content"] == {"handed_back": True, "component_id": cid}
    got = await component(a, cid)
    assert (got["status"], got["main_reason"]) == ("handed-back", "yours")  # Max reads it
    tool = next(m for m in await thread_messages(a, tid) if m["role"] == "tool")
    assert "yours" not in str(tool["display"])
    ok = await a.user.post(f"/v1/components/{cid}/answer", json={"selected": ["drop"]})
    assert ok.status_code == 200 and ok.json()["status"] == "answered"


async def test_hand_back_only_from_with_main(harness: Harness) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    _, content = await post_card(a.agent, tid, CHOICE)
    cid = content["components"][0]["id"]
    resp = await main_tool(a, "hand_back", {"component_id": cid})
    assert resp.status_code == 409 and resp.json()["code"] == "conflict"
    assert resp.json()["content"]["handed_back"] is False


@pytest.mark.parametrize(("note", "message"), [
    (7, "note must be a string"), ("x" * 2001, "at most 2000 characters")])
async def test_a_bad_hand_back_note_is_refused_and_hands_nothing_back(
        harness: Harness, note: Any, message: str) -> None:
    a = await harness.actor("max")
    _, cid = await card_with_main(a, CHOICE)
    resp = await main_tool(a, "hand_back", {"component_id": cid, "note": note})
    assert resp.status_code == 422, resp.text
    assert resp.json()["content"] == {"handed_back": False,
                                      "error": f"arguments.note: {message}"}
    assert (await component(a, cid))["status"] == "with-main"


async def test_main_tools_are_forbidden_outside_main(harness: Harness) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    call_id = await post_call(a.agent, tid, "hand_back", {"component_id": "x:y"})
    resp = await execute(a.agent, tid, call_id)
    assert resp.status_code == 403 and resp.json()["code"] == "forbidden"
    assert resp.json()["content"] == {"handed_back": False,
                                      "error": "hand_back is not offered in a normal thread."}
    history = (await a.agent.get(f"/v1/agent/threads/{tid}/history")).json()["messages"]
    assert [m["role"] for m in history] == ["assistant", "tool"]


async def test_revoke_only_from_main_answered(harness: Harness) -> None:
    a = await harness.actor("max")
    _, cid = await card_with_main(a, CHOICE)
    resp = await a.user.post(f"/v1/components/{cid}/revoke")
    assert resp.status_code == 409 and resp.json()["code"] == "conflict"


async def test_the_full_revoke_story(harness: Harness) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a.user, title="Schema work")
    _, content = await post_card(a.agent, tid, CHOICE, main_after_minutes=0)
    cid = content["components"][0]["id"]
    swept = await harness.services.components.sweep_due()
    assert swept == {"handed_to_main": 1, "kept_open": 0}
    assert (await component(a, cid))["status"] == "with-main"
    resp = await main_tool(a, "answer_for_max", {"component_id": cid, "selected": ["drop"],
                                                 "reason": "nobody uses it"})
    assert resp.status_code == 200
    revoked = await a.user.post(f"/v1/components/{cid}/revoke")
    assert revoked.status_code == 200 and revoked.json()["status"] == "revoked"
    decision = (await a.user.get("/v1/decisions")).json()["decisions"]
    assert [d["component_id"] for d in decision] == [cid]  # open again
    answered = await a.user.post(f"/v1/components/{cid}/answer", json={"selected": ["keep"]})
    assert answered.status_code == 200 and answered.json()["answered_by"] == "max"
    story = [(m["role"], (m["source_meta"] or {})) for m in await thread_messages(a, tid)]
    kinds = [role if role in ("assistant", "tool") else
             ("main-answer" if meta.get("componentAnswer", {}).get("answeredBy") == "main" else
              "max-answer" if "componentAnswer" in meta else
              "event:" + meta["askHandoff"]["phase"]) for role, meta in story]
    # the non-waking history rows (issue 16) say where the question went before each answer
    assert kinds == ["assistant", "tool", "event:with-main", "event:main-answered",
                     "main-answer", "event:revoked", "max-answer"]
    assert (await a.user.get("/v1/decisions")).json()["decisions"] == []


async def test_revoke_racing_a_claim_of_the_asking_thread(harness: Harness) -> None:
    """Revoke locks the card, then wakes the asking thread; a claim of that thread stamps
    ``seen_at`` on the card whose answer it hands over. The revoke is held after it locked the
    card while the claim runs into it: both must go through (it was a deadlock → 500, found
    by the kill -9 suite: the claim wrote its turn before stamping, and a wake-up waits for a
    turn being written)."""
    a = await harness.actor("max")
    tid, cid = await card_with_main(a, CHOICE)
    main_turn = (await a.agent.post("/v1/agent/turns/claim", json={"wait_s": 0})).json()
    assert main_turn["thread"]["id"] == a.main_thread_id  # the asking thread's turn is next
    resp = await main_tool(a, "answer_for_max", {"component_id": cid, "selected": ["drop"],
                                                 "reason": "nobody uses it"})
    assert resp.status_code == 200, resp.text
    db = harness.services.db
    async with hold_after(harness.services.settings.database_url, "decisions", "UPDATE",
                          "NEW.status = 'open'", 4243):
        revoking = asyncio.create_task(a.user.post(f"/v1/components/{cid}/revoke"))
        await wait_for_lock_waiters(db)  # revoke holds the card, held in its reopen
        claiming = asyncio.create_task(a.agent.post("/v1/agent/turns/claim",
                                                    json={"wait_s": 0}))
        await until_done_or_waiting(db, claiming, 2)
    revoked, claimed = await asyncio.wait_for(asyncio.gather(revoking, claiming), 20)
    assert revoked.status_code == 200, revoked.text
    assert claimed.status_code == 200, claimed.text
    turn = claimed.json()
    assert turn["thread"]["id"] == tid
    assert "on Max's behalf" in turn["messages"][-1]["content"]
    # the revoke's event came after the hand-over: it waits in the running turn's inbox
    inbox = await a.agent.post(f"/v1/agent/turns/{turn['turn']['id']}/inbox")
    [event] = [m["body"] for m in await thread_messages(a, tid)
               if (m["source_meta"] or {}).get("askHandoff", {}).get("phase") == "revoked"]
    [delivered] = inbox.json()["messages"]
    assert delivered["content"].endswith(event)


# ----- the sweeper -----

async def test_sweep_keeps_untransferable_cards_open_with_a_carrier(harness: Harness) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    await harness.services.presence.focus("c1", a.user_id, tid)  # watching: no carrier
    _, content = await post_card(a.agent, tid, SECRET)
    cid = content["components"][0]["id"]
    assert (await component(a, cid))["decision_id"] is None
    later = harness.services.clock.now() + timedelta(hours=2)
    assert await harness.services.components.sweep_due(now=later) == {
        "handed_to_main": 0, "kept_open": 1}
    got = await component(a, cid)
    assert got["status"] == "open" and got["due_at"] is None and got["decision_id"] is not None
    assert await harness.services.components.sweep_due(now=later) == {
        "handed_to_main": 0, "kept_open": 0}


async def test_sweep_is_idle_before_due(harness: Harness) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    await post_card(a.agent, tid, CHOICE, main_after_minutes=30)
    assert await harness.services.components.sweep_due() == {"handed_to_main": 0, "kept_open": 0}


async def test_concurrent_sweepers_hand_each_card_over_once(harness: Harness) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    for _ in range(40):
        await post_card(a.agent, tid, CHOICE, TEXT, main_after_minutes=0)
    results = await asyncio.gather(*[harness.services.components.sweep_due(limit=7)
                                     for _ in range(12)])
    rest = await harness.services.components.sweep_due_all()
    handed = sum(r["handed_to_main"] for r in results) + rest["handed_to_main"]
    assert handed == 80
    async with harness.services.db.connection() as conn:
        counts = await conn.fetch(
            "SELECT source_meta->'askHandoff'->>'componentId' AS cid, role, count(*)"
            " FROM messages WHERE source_meta ? 'askHandoff' GROUP BY 1, 2")
    # one hand-off message in Main's thread and one history row in the asking thread per card
    assert len(counts) == 160 and all(r["count"] == 1 for r in counts)
    assert sorted({r["role"] for r in counts}) == ["event", "user"]


async def test_sweep_uses_the_partial_index(harness: Harness) -> None:
    from maxclaw.components.sweep_store import CLAIM_DUE

    async with harness.services.db.transaction() as conn:
        await conn.execute("SET LOCAL enable_seqscan = off")  # a tiny table: what *can* it use
        plan = "\n".join(r[0] for r in await conn.fetch(
            "EXPLAIN " + CLAIM_DUE, harness.services.clock.now(), 500))
    assert "message_components_due" in plan


async def test_answer_for_max_needs_the_card_with_main(harness: Harness) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    _, content = await post_card(a.agent, tid, CHOICE)
    cid = content["components"][0]["id"]
    resp = await main_tool(a, "answer_for_max", {"component_id": cid, "selected": ["keep"],
                                                 "reason": "r"})
    assert resp.status_code == 409 and resp.json()["code"] == "conflict"
    assert (await component(a, cid))["status"] == "open"
    assert [m for m in await thread_messages(a, tid) if m["role"] == "user"] == []


async def test_handed_back_and_revoked_cards_answer_normally_from_every_surface(
        harness: Harness) -> None:
    a = await harness.actor("max")
    _, cid = await card_with_main(a, CHOICE)
    assert (await main_tool(a, "hand_back", {"component_id": cid})).status_code == 200
    decision_id = (await component(a, cid))["decision_id"]
    resp = await a.user.post(f"/v1/decisions/{decision_id}/settle", json={"selected": ["drop"]})
    assert resp.status_code == 200 and resp.json()["settled_via"] == "decision"
    assert (await component(a, cid))["status"] == "answered"
