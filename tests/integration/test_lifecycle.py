"""The question lifecycle (issue 16): withdraw, supersede, expiry, main_after_minutes null —
and the races between them and Max's answer, on PostgreSQL."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from tests.cards import CHOICE, TEXT, ask_args, execute, new_thread, post_call, post_card
from tests.conftest import Actor, Harness


async def tool(a: Actor, tid: str, name: str, args: dict[str, Any]) -> tuple[int, Any]:
    call_id = await post_call(a.agent, tid, name, args)
    resp = await execute(a.agent, tid, call_id)
    return resp.status_code, resp.json()


async def component(a: Actor, cid: str) -> dict[str, Any]:
    return dict((await a.user.get(f"/v1/components/{cid}")).json())


async def count(h: Harness, sql: str, *args: Any) -> int:
    async with h.services.db.connection() as conn:
        return int(await conn.fetchval(sql, *args))


async def test_withdraw_a_whole_card_and_every_surface_then_refuses(harness: Harness) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    call_id, content = await post_card(a.agent, tid, CHOICE, TEXT)
    cids = [c["id"] for c in content["components"]]
    code, body = await tool(a, tid, "withdraw_question",
                            {"tool_call_id": call_id, "reason": "I found it in the docs"})
    assert code == 200, body
    assert sorted(body["content"]["component_ids"]) == sorted(cids)
    first = await component(a, cids[0])
    assert first["status"] == "withdrawn" and first["withdrawn_reason"] == "I found it in the docs"
    assert not first["answerable_here"]
    messages = (await a.user.get(f"/v1/threads/{tid}/messages")).json()["messages"]
    tool_row = next(m for m in messages if m["role"] == "tool" and m["tool_call_id"] == call_id)
    assert tool_row["display"]["states"][cids[0]]["status"] == "withdrawn"
    decision = next(d for d in (await a.user.get("/v1/decisions?status=all")).json()["decisions"]
                    if d["id"] == first["decision_id"])
    assert decision["status"] == "settled" and decision["settled_via"] == "withdrawn"
    users_before = await count(harness, "SELECT count(*) FROM messages WHERE role = 'user'")
    card = await a.user.post(f"/v1/components/{cids[0]}/answer", json={"selected": ["keep"]})
    panel = await a.user.post(f"/v1/decisions/{first['decision_id']}/settle",
                              json={"selected": ["keep"]})
    push = await a.user.post("/v1/push/actions", json={"decision_id": first["decision_id"],
                                                       "action": "opt:keep"})
    for resp in (card, panel, push):
        assert resp.status_code == 409 and resp.json()["code"] == "withdrawn", resp.text
    assert await count(harness, "SELECT count(*) FROM messages WHERE role = 'user'") \
        == users_before
    # idempotent: again is a success that changes nothing; a settled card is a refusal
    code, body = await tool(a, tid, "withdraw_question", {"component_id": cids[0],
                                                          "reason": "again"})
    assert code == 200 and body["content"]["already_withdrawn"] == [cids[0]]
    _, other = await post_card(a.agent, tid, CHOICE)
    ocid = other["components"][0]["id"]
    assert (await a.user.post(f"/v1/components/{ocid}/answer",
                              json={"selected": ["drop"]})).status_code == 200
    code, body = await tool(a, tid, "withdraw_question", {"component_id": ocid, "reason": "x"})
    assert code == 409 and body["code"] == "settled"
    assert "nothing was withdrawn" in body["content"]["error"]


async def test_withdraw_refuses_bad_input_and_writes_nothing(harness: Harness) -> None:
    a = await harness.actor("max")
    tid, elsewhere = await new_thread(a.user), await new_thread(a.user)
    _, content = await post_card(a.agent, elsewhere, CHOICE)
    cid = content["components"][0]["id"]
    for args, loc in [({"component_id": cid, "reason": "mine?"}, ["arguments", "component_id"]),
                      ({"tool_call_id": "nope", "reason": "r"}, ["arguments", "tool_call_id"]),
                      ({"component_id": cid}, ["arguments", "reason"]),
                      ({"reason": "which?"}, ["arguments"])]:
        code, body = await tool(a, tid, "withdraw_question", args)
        assert code == 422 and body["data"]["errors"][0]["loc"] == loc, body
        assert body["content"]["withdrawn"] is False
    assert (await component(a, cid))["status"] == "open"


async def test_supersede_posts_the_new_card_and_withdraws_the_old_at_once(
        harness: Harness) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    old_call, old = await post_card(a.agent, tid, CHOICE)
    old_cid = old["components"][0]["id"]
    new_call, new = await post_card(a.agent, tid, CHOICE, supersedes=[old_call])
    assert new["posted"] is True
    gone = await component(a, old_cid)
    assert gone["status"] == "withdrawn" and gone["superseded_by"] == new_call
    assert gone["withdrawn_reason"] == "superseded"
    assert (await component(a, new["components"][0]["id"]))["status"] == "open"
    # unknown or settled ids: refused with the path, nothing posted
    call = await post_call(a.agent, tid, "ask_user_question",
                           ask_args(CHOICE, supersedes=["ghost"]))
    resp = await execute(a.agent, tid, call)
    assert resp.status_code == 422
    assert resp.json()["data"]["errors"][0]["loc"] == ["arguments", "supersedes", 0]
    assert await count(harness, "SELECT count(*) FROM message_components WHERE id LIKE $1",
                       call + ":%") == 0
    new_cid = new["components"][0]["id"]
    assert (await a.user.post(f"/v1/components/{new_cid}/answer",
                              json={"selected": ["keep"]})).status_code == 200
    call = await post_call(a.agent, tid, "ask_user_question",
                           ask_args(CHOICE, supersedes=[new_cid]))
    resp = await execute(a.agent, tid, call)
    assert resp.status_code == 409 and resp.json()["code"] == "settled"
    assert await count(harness, "SELECT count(*) FROM message_components WHERE id LIKE $1",
                       call + ":%") == 0


async def test_main_after_minutes_null_and_expiry_validation(harness: Harness) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    _, content = await post_card(a.agent, tid, CHOICE, main_after_minutes=None,
                                 expires_after_minutes=5)
    cid = content["components"][0]["id"]
    got = await component(a, cid)
    assert got["due_at"] is None and got["expires_at"] is not None
    assert content["components"][0]["answer_due_at"] is None
    # never swept to Main by time, but Max may still let Main decide
    await harness.services.components.sweep_due(now=harness.services.clock.now()
                                                + timedelta(days=30))
    assert (await component(a, cid))["status"] == "open"
    for card in [{"expires_after_minutes": -1}, {"expires_after_minutes": 10**9}]:
        call = await post_call(a.agent, tid, "ask_user_question", ask_args(CHOICE, **card))
        resp = await execute(a.agent, tid, call)
        assert resp.status_code == 422, resp.text
        assert "expires_after_minutes" in resp.json()["data"]["errors"][0]["loc"]


async def test_two_sweepers_expire_each_card_once_and_wake_the_thread(harness: Harness) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    cids = []
    for _ in range(12):
        _, content = await post_card(a.agent, tid, CHOICE, main_after_minutes=None,
                                     expires_after_minutes=1)
        cids.append(content["components"][0]["id"])
    later = harness.services.clock.now() + timedelta(minutes=2)
    swept = await asyncio.gather(*(harness.services.components.sweep_expired(limit=5, now=later)
                                   for _ in range(4)))
    swept_more = await harness.services.components.sweep_expired(limit=50, now=later)
    assert sum(swept) + swept_more == 12
    assert await count(harness, "SELECT count(*) FROM message_components"
                       " WHERE status = 'expired' AND thread_id = $1::uuid", tid) == 12
    events = await count(harness, "SELECT count(*) FROM messages WHERE thread_id = $1::uuid"
                         " AND role = 'event' AND source_meta->'askExpired'->>'componentId'"
                         " IS NOT NULL", tid)
    assert events == 12
    assert await count(harness, "SELECT count(*) FROM component_audit WHERE to_status ="
                       " 'expired'") == 12
    assert await count(harness, "SELECT count(*) FROM turns WHERE thread_id = $1::uuid"
                       " AND status IN ('queued', 'running')", tid) == 1
    resp = await a.user.post(f"/v1/components/{cids[0]}/answer", json={"selected": ["keep"]})
    assert resp.status_code == 409 and resp.json()["code"] == "expired"


async def test_withdraw_answer_main_and_expiry_race_one_winner(harness: Harness) -> None:
    """Five at once on one card held by Main: Max's answer from the panel, Main's answer, the
    agent's withdraw, the expiry sweep: exactly one wins; at most one message."""
    for i in range(3):
        a = await harness.actor(f"max{i}")
        tid = await new_thread(a.user)
        _, content = await post_card(a.agent, tid, CHOICE, expires_after_minutes=30)
        cid = content["components"][0]["id"]
        assert (await a.user.post(f"/v1/components/{cid}/to-main")).status_code == 200
        decision_id = (await component(a, cid))["decision_id"]
        async with harness.services.db.connection() as conn:
            await conn.execute("UPDATE message_components SET expires_at = now()"
                               " WHERE id = $1", cid)
        w_call = await post_call(a.agent, tid, "withdraw_question",
                                 {"component_id": cid, "reason": "moot"})
        m_call = await post_call(a.agent, a.main_thread_id, "answer_for_max",
                                 {"component_id": cid, "selected": ["keep"], "reason": "usual"})
        results = await asyncio.gather(
            a.user.post(f"/v1/decisions/{decision_id}/settle", json={"selected": ["drop"]}),
            execute(a.agent, tid, w_call),
            execute(a.agent, a.main_thread_id, m_call),
            harness.services.components.sweep_expired(
                now=harness.services.clock.now() + timedelta(minutes=1)))
        wins = [r.status_code == 200 for r in results[:3]] + [results[3] == 1]
        assert sum(wins) == 1, results
        final = (await component(a, cid))["status"]
        winner = ["answered", "withdrawn", "main-answered", "expired"][wins.index(True)]
        assert final == winner
        answers = await count(harness, "SELECT count(*) FROM messages WHERE thread_id = $1::uuid"
                              " AND source_meta ? 'componentAnswer'", tid)
        assert answers == (1 if winner in ("answered", "main-answered") else 0)
        assert await count(harness, "SELECT count(*) FROM component_audit"
                           " WHERE component_id = $1 AND from_status = 'with-main'", cid) == 1


async def test_a_card_swept_to_main_keeps_its_expiry_on_the_card(harness: Harness) -> None:
    """The due sweep's mirror writes every state field: a card that expires and goes to Main
    first still shows when it expires (the sweep's mirror once wrote expires_at as null)."""
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    _, content = await post_card(a.agent, tid, CHOICE, main_after_minutes=5,
                                 expires_after_minutes=60)
    cid = content["components"][0]["id"]
    expires_at = (await component(a, cid))["expires_at"]
    assert expires_at is not None
    services = harness.services
    moved = await services.components.sweep_due(now=services.clock.now() + timedelta(minutes=6))
    assert moved["handed_to_main"] == 1
    async with services.db.connection() as conn:
        state = await conn.fetchval(
            "SELECT display->'states'->$2 FROM messages WHERE thread_id = $1::uuid"
            " AND display ? 'states'", tid, cid)
    assert state["status"] == "with-main" and state["expires_at"] == expires_at, state
    assert (await component(a, cid))["expires_at"] == expires_at
