"""docs/api.md's words on the card tools, tried over HTTP as an integrator would (issue 28):
``withdraw_question``'s result, the expiry event, and a refusal that writes the tool row."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from tests.cards import CHOICE, SECRET, execute, new_thread, post_call, post_card
from tests.conftest import Actor, Harness


async def _tool(a: Actor, tid: str, name: str, args: dict[str, Any]) -> tuple[int, Any]:
    call_id = await post_call(a.agent, tid, name, args)
    resp = await execute(a.agent, tid, call_id)
    return resp.status_code, resp.json()


async def _tool_rows(h: Harness, tid: str) -> list[Any]:
    async with h.services.db.connection() as conn:
        return [r["content"] for r in await conn.fetch(
            "SELECT content FROM messages WHERE thread_id = $1::uuid AND role = 'tool'"
            " ORDER BY id", tid)]


async def test_withdraw_question_answers_the_list_of_ids_it_withdrew(harness: Harness) -> None:
    """"Tool ``withdraw_question`` … result ``{"withdrawn": [ids]}``"."""
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    call_id, content = await post_card(a.agent, tid, CHOICE, SECRET)
    cids = [c["id"] for c in content["components"]]
    code, body = await _tool(a, tid, "withdraw_question",
                             {"component_id": cids[0], "reason": "found it"})
    assert code == 200, body
    assert body["content"]["withdrawn"] == [cids[0]]
    code, body = await _tool(a, tid, "withdraw_question",
                             {"tool_call_id": call_id, "reason": "all done"})
    assert code == 200, body
    # this call withdrew only the second; the first was withdrawn before
    assert body["content"]["withdrawn"] == [cids[1]]
    assert isinstance(body["content"]["withdrawn"], list)


async def test_expiry_wakes_the_asking_thread_with_ask_expired(harness: Harness) -> None:
    """"at expiry an unsettled component becomes ``expired`` and the asking thread gets a
    waking event with ``source_meta.askExpired = {"componentId"}``"."""
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    _, content = await post_card(a.agent, tid, CHOICE, main_after_minutes=None,
                                 expires_after_minutes=1)
    cid = content["components"][0]["id"]
    later = harness.services.clock.now() + timedelta(minutes=2)
    assert await harness.services.components.sweep_expired(now=later) == 1
    inbox = await a.agent.get(f"/v1/agent/threads/{tid}/history")
    assert inbox.status_code == 200, inbox.text
    async with harness.services.db.connection() as conn:
        events = await conn.fetch(
            "SELECT source_meta FROM messages WHERE thread_id = $1::uuid AND role = 'event'"
            " AND delivered_at IS NULL", tid)
        woken = await conn.fetchval(
            "SELECT count(*) FROM turns WHERE thread_id = $1::uuid"
            " AND status IN ('queued', 'running')", tid)
    assert [e["source_meta"]["askExpired"] for e in events] == [{"componentId": cid}]
    assert woken == 1


async def test_main_tools_on_a_question_not_there_write_the_tool_row(harness: Harness) -> None:
    """"Every refusal of ``execute`` writes the tool row in the model's words … so no
    assistant tool call is left without a result": another user's question, or none."""
    a, eve = await harness.actor("max"), await harness.actor("eve")
    eve_tid = await new_thread(eve.user)
    _, content = await post_card(eve.agent, eve_tid, CHOICE)
    eves = content["components"][0]["id"]
    assert (await eve.user.post(f"/v1/components/{eves}/to-main")).status_code == 200
    calls = [("answer_for_max", {"component_id": eves, "selected": ["keep"], "reason": "r"},
              "answered"),
             ("hand_back", {"component_id": eves}, "handed_back"),
             ("answer_for_max", {"component_id": "call_none:q1", "selected": ["keep"],
                                 "reason": "r"}, "answered"),
             ("hand_back", {"component_id": "call_none:q1"}, "handed_back")]
    for name, args, key in calls:
        call_id = await post_call(a.agent, a.main_thread_id, name, args)
        resp = await execute(a.agent, a.main_thread_id, call_id)
        assert resp.status_code == 404, resp.text
        assert resp.json()["content"] == {key: False, "error": resp.json()["message"]}
        again = await execute(a.agent, a.main_thread_id, call_id)  # replayed, not re-run
        assert again.status_code == 404 and again.json()["content"] == resp.json()["content"]
    rows = await _tool_rows(harness, a.main_thread_id)
    assert [r[key] for r, (_, _, key) in zip(rows, calls, strict=True)] == [False] * len(calls)
    # eve's question is untouched
    got = await eve.user.get(f"/v1/components/{eves}")
    assert got.json()["status"] == "with-main"
