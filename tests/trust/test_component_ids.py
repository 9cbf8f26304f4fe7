"""Finding 3: component ids are the caller's, so they are scoped to their owner.

A model server that numbers its calls ``call_0``, ``call_1`` in every thread must not collide
with another user (or be probed by one); inside one user's threads a reused id is a 409
``conflict`` written as the tool row, never a 500.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from tests.cards import CHOICE, ask_args, execute, new_thread, post_call
from tests.conftest import Harness


async def card_with_id(agent: Any, thread_id: str, call_id: str, **card: Any) -> None:
    await post_call(agent, thread_id, "ask_user_question", ask_args(CHOICE, **card), call_id)
    resp = await execute(agent, thread_id, call_id)
    assert resp.status_code == 200, resp.text


async def test_two_users_may_use_the_same_tool_call_id(harness: Harness) -> None:
    a = await harness.actor("max")
    b = await harness.actor("eve")
    ta, tb = await new_thread(a.user), await new_thread(b.user)
    await card_with_id(a.agent, ta, "call_0")
    # before: 500 (message_components primary key) on every retry, and no tool row
    call = await post_call(b.agent, tb, "ask_user_question", ask_args(CHOICE), "call_0")
    resp = await execute(b.agent, tb, call)
    assert resp.status_code == 200, resp.text
    assert resp.json()["content"]["posted"] is True
    # each user sees their own component under the same id, and both carriers exist
    for actor, tid in ((a, ta), (b, tb)):
        got = await actor.user.get("/v1/components/call_0:q1")
        assert got.status_code == 200 and got.json()["thread_id"] == tid
    async with harness.services.db.connection() as conn:
        carriers = await conn.fetchval(
            "SELECT count(DISTINCT user_id) FROM decisions WHERE dedupe_key = 'ask:call_0:q1'")
    assert carriers == 2


async def test_a_reused_id_in_another_thread_of_the_same_user_is_a_409_tool_row(
        harness: Harness) -> None:
    a = await harness.actor("max")
    t1, t2 = await new_thread(a.user), await new_thread(a.user)
    await card_with_id(a.agent, t1, "call_0")
    await post_call(a.agent, t2, "ask_user_question", ask_args(CHOICE), "call_0")
    first = await execute(a.agent, t2, "call_0")
    assert first.status_code == 409, first.text
    assert first.json()["code"] == "conflict"
    assert first.json()["content"]["posted"] is False
    assert "new tool call id" in first.json()["content"]["error"]
    # written as the tool row: a retry replays it, and the model sees it in its history
    again = await execute(a.agent, t2, "call_0")
    assert again.status_code == 409 and again.json() == first.json()
    msgs = (await a.user.get(f"/v1/threads/{t2}/messages")).json()["messages"]
    tool = [m for m in msgs if m["role"] == "tool"]
    assert len(tool) == 1 and tool[0]["content"]["posted"] is False
    # the first thread's card is untouched
    got = (await a.user.get("/v1/components/call_0:q1")).json()
    assert got["thread_id"] == t1 and got["status"] == "open"


async def test_the_sweep_keeps_same_id_cards_of_two_users_apart(harness: Harness) -> None:
    a = await harness.actor("max")
    b = await harness.actor("eve")
    ta, tb = await new_thread(a.user), await new_thread(b.user)
    await card_with_id(a.agent, ta, "call_0", main_after_minutes=0)
    await card_with_id(b.agent, tb, "call_0", main_after_minutes=0)
    result = await harness.services.components.sweep_due(
        now=harness.services.clock.now() + timedelta(minutes=1))
    assert result == {"handed_to_main": 2, "kept_open": 0}
    for actor in (a, b):
        got = (await actor.user.get("/v1/components/call_0:q1")).json()
        assert got["status"] == "with-main" and got["decision_id"] is not None
    async with harness.services.db.connection() as conn:
        owners = await conn.fetch(
            "SELECT d.user_id = c.user_id AS same FROM message_components c"
            " JOIN decisions d ON d.id = c.decision_id")
    assert [r["same"] for r in owners] == [True, True]
