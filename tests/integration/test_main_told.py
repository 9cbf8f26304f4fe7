"""Max is told what Main did (issue 16, item 5): the "Main answered … for you" push and its
Revoke token, the panel item that stays until dismissed, the hand-back push with Main's note,
and the asking thread's non-waking history rows. Real PostgreSQL; pushes decrypted as a
browser would (tests/integration/test_push_action_tokens.py)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from tests.cards import CHOICE, new_thread, post_card
from tests.conftest import Actor, Harness
from tests.integration.push_fakes import Endpoint
from tests.integration.test_main_handoff import main_tool
from tests.integration.test_push_action_tokens import act, ask, push, register, snapshot

__all__ = ["push"]  # the fixture, imported for this module's tests

QUESTION = CHOICE["question"]


async def to_main(a: Actor, cid: str) -> None:
    resp = await a.user.post(f"/v1/components/{cid}/to-main")
    assert resp.status_code == 200, resp.text


async def answer_for_max(a: Actor, cid: str, reason: str = "you always keep one") -> None:
    resp = await main_tool(a, "answer_for_max", {"component_id": cid, "selected": ["keep"],
                                                 "reason": reason})
    assert resp.status_code == 200, resp.text


async def hand_back(a: Actor, cid: str, note: str | None) -> None:
    args: dict[str, Any] = {"component_id": cid}
    if note is not None:
        args["note"] = note
    resp = await main_tool(a, "hand_back", args)
    assert resp.status_code == 200, resp.text


async def rows(h: Harness, sql: str, *args: Any) -> list[dict[str, Any]]:
    async with h.services.db.connection() as conn:
        return [dict(r) for r in await conn.fetch(sql, *args)]


async def thread_rows(h: Harness, tid: str) -> list[dict[str, Any]]:
    return await rows(h, "SELECT id, role, body, source_meta FROM messages"
                         " WHERE thread_id = $1::uuid ORDER BY id", tid)


async def turns_of(h: Harness, tid: str) -> int:
    return len(await rows(h, "SELECT id FROM turns WHERE thread_id = $1::uuid", tid))


async def test_main_answers_max_gets_one_push_whose_revoke_token_works_once(
        push: Harness) -> None:
    a = await push.actor("max")
    async with Endpoint() as endpoint:
        phone = await register(a, endpoint, "phone")
        tid, cid = await ask(push, a)
        [question] = phone.payloads()
        await to_main(a, cid)
        await answer_for_max(a, cid)
        await push.services.push.dispatcher.run_until_idle()
        payloads = phone.payloads()
    told = [p for p in payloads if p["kind"] == "main-answered"]
    assert len(told) == 1, payloads
    [note] = told
    assert note["body"] == f"Main answered '{QUESTION}' for you: Keep one version"
    assert [x["id"] for x in note["actions"]] == ["why", "revoke"]
    assert note["url"] == f"/#/t/{tid}" and note["component_id"] == cid
    assert note["reason"] == "you always keep one"
    # the question's withdraw reached the phone before the news (same collapse id)
    kinds = [p["kind"] for p in payloads]
    assert kinds.index("withdraw") < kinds.index("main-answered")
    assert note["collapse_id"] == question["collapse_id"]
    token = note["action_token"]
    # tokens do what their notification offers: no answering with Revoke's, no revoking with
    # the question's; refusals write nothing
    before = await snapshot(push, a.user_id)
    wrong = await act(push, {"action_token": token, "action": "opt:drop"})
    assert wrong.status_code == 401 and wrong.json()["data"]["reason"] == "action_token_scope"
    old = await act(push, {"action_token": question["action_token"], "action": "revoke"})
    assert old.status_code == 401 and old.json()["data"]["reason"] == "action_token_scope"
    assert await snapshot(push, a.user_id) == before
    resp = await act(push, {"action_token": token, "action": "revoke"})
    assert resp.status_code == 200, resp.text
    assert resp.json()["status"] == "open"  # the decision reopened through its reverter
    component = (await a.user.get(f"/v1/components/{cid}")).json()
    assert component["status"] == "revoked" and component["answer"] is None
    audit = await rows(push, "SELECT actor FROM component_audit WHERE component_id = $1"
                             " AND to_status = 'revoked'", cid)
    assert audit == [{"actor": "max"}]
    before = await snapshot(push, a.user_id)
    again = await act(push, {"action_token": token, "action": "revoke"})
    assert again.status_code == 409 and again.json()["data"]["reason"] == "action_token_used"
    assert await snapshot(push, a.user_id) == before


async def test_revoke_token_after_max_revoked_elsewhere_writes_nothing(push: Harness) -> None:
    a = await push.actor("max")
    async with Endpoint() as endpoint:
        phone = await register(a, endpoint, "phone")
        _, cid = await ask(push, a)
        await to_main(a, cid)
        await answer_for_max(a, cid)
        await push.services.push.dispatcher.run_until_idle()
        [note] = [p for p in phone.payloads() if p["kind"] == "main-answered"]
    assert (await a.user.post(f"/v1/components/{cid}/revoke")).status_code == 200
    before = await snapshot(push, a.user_id)
    # the reopen revoked the decision's unused tokens, the Revoke button's among them
    resp = await act(push, {"action_token": note["action_token"], "action": "revoke"})
    assert resp.status_code == 401 and resp.json()["data"]["reason"] == "action_token_stale"
    assert await snapshot(push, a.user_id) == before


async def test_hand_back_pushes_the_question_again_with_mains_note(push: Harness) -> None:
    a = await push.actor("max")
    async with Endpoint() as endpoint:
        phone = await register(a, endpoint, "phone")
        _, cid = await ask(push, a)
        await to_main(a, cid)
        await hand_back(a, cid, "Only you know whether old clients still read it")
        await push.services.push.dispatcher.run_until_idle()
        payloads = phone.payloads()
    back = [p for p in payloads if p.get("main_note")]
    assert len(back) == 1, payloads
    [again] = back
    assert again["kind"] == "agent-question"
    assert again["body"] == ("Main handed this back to you: Only you know whether old clients "
                             f"still read it\n{QUESTION}")
    # still the question: its buttons answer it
    resp = await act(push, {"action_token": again["action_token"], "action": "opt:keep"})
    assert resp.status_code == 200, resp.text
    assert (await a.user.get(f"/v1/components/{cid}")).json()["status"] == "answered"


async def test_hand_back_without_a_note_says_so(push: Harness) -> None:
    a = await push.actor("max")
    async with Endpoint() as endpoint:
        phone = await register(a, endpoint, "phone")
        _, cid = await ask(push, a)
        await to_main(a, cid)
        await hand_back(a, cid, None)
        await push.services.push.dispatcher.run_until_idle()
        last = phone.payloads()[-1]
    assert last["body"] == f"Main handed this back to you without a note\n{QUESTION}"
    assert last["main_note"] is None


async def test_the_panel_keeps_mains_answer_until_max_dismisses_it(harness: Harness) -> None:
    a = await harness.actor("max")
    eve = await harness.actor("eve")
    tid = await new_thread(a.user)
    _, content = await post_card(a.agent, tid, CHOICE)
    cid = content["components"][0]["id"]
    decision_id = (await a.user.get(f"/v1/components/{cid}")).json()["decision_id"]

    async def panel() -> dict[int, dict[str, Any]]:
        resp = await a.user.get("/v1/decisions?status=panel")
        assert resp.status_code == 200, resp.text
        return {d["id"]: d for d in resp.json()["decisions"]}

    # open: in the panel, not dismissable
    assert decision_id in await panel()
    refused = await a.user.post(f"/v1/decisions/{decision_id}/dismiss")
    assert refused.status_code == 409 and refused.json()["code"] == "conflict"
    await to_main(a, cid)
    await answer_for_max(a, cid)
    item = (await panel())[decision_id]
    assert item["status"] == "settled" and item["answered_by_main"] and item["in_panel"]
    assert item["answer_text"] == "Keep one version" and item["dismissed_at"] is None
    open_only = (await a.user.get("/v1/decisions?status=open")).json()["decisions"]
    assert decision_id not in {d["id"] for d in open_only}  # 'open' keeps its meaning
    # another user's dismiss is a 404 and changes nothing
    assert (await eve.user.post(f"/v1/decisions/{decision_id}/dismiss")).status_code == 404
    assert (await panel())[decision_id]["dismissed_at"] is None
    first = await a.user.post(f"/v1/decisions/{decision_id}/dismiss")
    assert first.status_code == 200, first.text
    assert first.json()["dismissed_at"] is not None and not first.json()["in_panel"]
    second = await a.user.post(f"/v1/decisions/{decision_id}/dismiss")  # idempotent
    assert second.status_code == 200 and second.json() == first.json()
    assert decision_id not in await panel()
    assert (await a.user.post("/v1/decisions/999999/dismiss")).status_code == 404
    assert (await a.user.post("/v1/decisions/x/dismiss")).status_code in (404, 422)
    bad = await a.user.get("/v1/decisions?status=nope")
    assert bad.status_code == 422


async def test_a_revoked_answer_comes_back_to_the_panel_as_open(harness: Harness) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    _, content = await post_card(a.agent, tid, CHOICE)
    cid = content["components"][0]["id"]
    decision_id = (await a.user.get(f"/v1/components/{cid}")).json()["decision_id"]
    await to_main(a, cid)
    await answer_for_max(a, cid)
    # the panel's Revoke is the card's revoke endpoint
    assert (await a.user.post(f"/v1/components/{cid}/revoke")).status_code == 200
    listed = (await a.user.get("/v1/decisions?status=panel")).json()["decisions"]
    item = next(d for d in listed if d["id"] == decision_id)
    assert item["status"] == "open" and not item["answered_by_main"] and item["in_panel"]


async def test_the_asking_thread_learns_where_its_question_went_without_waking(
        harness: Harness) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    _, content = await post_card(a.agent, tid, CHOICE)
    cid = content["components"][0]["id"]
    turns = await turns_of(harness, tid)
    await to_main(a, cid)
    [handed] = [r for r in await thread_rows(harness, tid) if r["role"] == "event"]
    assert handed["body"].startswith("Question handed to Main: \"Rename the status field\"")
    assert handed["source_meta"]["askHandoff"] == {"componentId": cid, "phase": "with-main",
                                                   "wakes": False}
    assert await turns_of(harness, tid) == turns  # the event woke nothing
    await answer_for_max(a, cid, reason="you always keep one")
    after = await thread_rows(harness, tid)
    events = [r for r in after if r["role"] == "event"]
    assert len(events) == 2
    told = events[1]
    assert told["body"].startswith("Main answered the question \"Rename the status field\"")
    assert "Keep one version" in told["body"] and '"you always keep one"' in told["body"]
    answer = next(r for r in after if r["role"] == "user")
    assert told["id"] < answer["id"]  # the history reads: where it came from, then the answer
    assert await turns_of(harness, tid) == turns + 1  # the answer wakes it, once


async def test_hand_back_leaves_a_history_row_and_no_turn(harness: Harness) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    _, content = await post_card(a.agent, tid, CHOICE)
    cid = content["components"][0]["id"]
    turns = await turns_of(harness, tid)
    await to_main(a, cid)
    await hand_back(a, cid, "yours")
    events = [r for r in await thread_rows(harness, tid) if r["role"] == "event"]
    assert [e["source_meta"]["askHandoff"]["phase"] for e in events] == ["with-main",
                                                                          "handed-back"]
    assert await turns_of(harness, tid) == turns


async def test_the_due_sweep_tells_the_asking_threads_set_wise(harness: Harness) -> None:
    a = await harness.actor("max")
    tids = [await new_thread(a.user) for _ in range(3)]
    for tid in tids:
        await post_card(a.agent, tid, CHOICE, main_after_minutes=1)
    turns = {tid: await turns_of(harness, tid) for tid in tids}
    result = await harness.services.components.sweep_due(
        now=harness.services.clock.now() + timedelta(minutes=2))
    assert result["handed_to_main"] == 3
    for tid in tids:
        events = [r for r in await thread_rows(harness, tid) if r["role"] == "event"]
        assert len(events) == 1 and events[0]["source_meta"]["askHandoff"]["phase"] == \
            "with-main"
        assert await turns_of(harness, tid) == turns[tid]


async def test_dismissing_mains_answer_withdraws_its_notification(push: Harness) -> None:
    a = await push.actor("max")
    async with Endpoint() as endpoint:
        phone = await register(a, endpoint, "phone")
        _, cid = await ask(push, a)
        await to_main(a, cid)
        await answer_for_max(a, cid)
        await push.services.push.dispatcher.run_until_idle()
        decision_id = (await a.user.get(f"/v1/components/{cid}")).json()["decision_id"]
        resp = await a.user.post(f"/v1/decisions/{decision_id}/dismiss")
        assert resp.status_code == 200, resp.text
        again = await a.user.post(f"/v1/decisions/{decision_id}/dismiss")
        assert again.status_code == 200
        await push.services.push.dispatcher.run_until_idle()
        kinds = [p["kind"] for p in phone.payloads()]
    # question, its withdraw, the news, and one withdraw of the news (not one per dismiss)
    assert kinds == ["agent-question", "withdraw", "main-answered", "withdraw"]


async def test_a_running_turn_does_not_requeue_for_where_its_question_went(
        harness: Harness) -> None:
    """The origin event is history, not input: the turn running when the card goes to Main
    finishes without queueing another, and the next window (after Main's answer) shows it."""
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    said = await a.user.post(f"/v1/threads/{tid}/messages", json={"body": "go"})
    assert said.status_code == 201, said.text
    claimed = await a.agent.post("/v1/agent/turns/claim", json={"wait_s": 0})
    assert claimed.status_code == 200, claimed.text
    turn = claimed.json()["turn"]
    _, content = await post_card(a.agent, tid, CHOICE)
    cid = content["components"][0]["id"]
    await to_main(a, cid)
    done = await a.agent.post(f"/v1/agent/turns/{turn['id']}/finish")
    assert done.status_code == 200, done.text
    assert done.json()["requeued"] is False
    assert (await a.user.get(f"/v1/threads/{tid}")).json()["turn_state"] == "idle"
    await answer_for_max(a, cid)
    window = await a.agent.get(f"/v1/agent/threads/{tid}/history")
    assert window.status_code == 200, window.text
    texts = [str(m.get("content")) for m in window.json()["messages"]]
    # history (delivered rows) already explains where the question went; the answer itself
    # is the new input the next claim hands over
    handed = [i for i, t in enumerate(texts) if "Question handed to Main" in t]
    told = [i for i, t in enumerate(texts) if "Main answered the question" in t]
    assert len(handed) == 1 and len(told) == 1 and handed[0] < told[0], texts
