"""The whole transitions table, walked on PostgreSQL.

For every status a component can be in and every row of ``components/machine.py``'s table, a
fresh card is brought to that status through the real paths (post, to-main, Main's tools,
revoke, answer), then the row's request is made through its real entry point (the card's REST
endpoints, the decisions panel, a push action, Main's tool calls, the sweeper). Where the
status is one of the row's from-states, the request succeeds and the card is in the row's
to-state, mirrored, with one audit row; otherwise it is refused with the row's documented code
and nothing was written (status, mirror, audit trail, messages and carrier unchanged).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from maxclaw.components.machine import TRANSITIONS, Effect, Status, Surface, Transition
from tests.cards import CHOICE, SECRET, new_thread, post_call, post_card
from tests.cards import execute as execute_call
from tests.conftest import Actor, Harness


async def _main_tool(a: Actor, name: str, args: dict[str, Any]) -> tuple[int, Any]:
    call_id = await post_call(a.agent, a.main_thread_id, name, args)
    resp = await execute_call(a.agent, a.main_thread_id, call_id)
    body = resp.json()
    return resp.status_code, body


async def _ok(resp: Any) -> None:
    assert resp.status_code == 200, resp.text


async def _agent_tool(a: Actor, tid: str, name: str, args: dict[str, Any]) -> tuple[int, Any]:
    call_id = await post_call(a.agent, tid, name, args)
    resp = await execute_call(a.agent, tid, call_id)
    return resp.status_code, resp.json()


async def _expire(h: Harness, cid: str) -> int:
    """Make ``cid`` past its expiry whatever its status and run the expiry sweep: only the
    table's from-states let it expire. Returns how many cards expired."""
    async with h.services.db.connection() as conn:
        await conn.execute("UPDATE message_components SET expires_at = now() - interval '1 minute'"
                           " WHERE id = $1", cid)
    n: int = await h.services.components.sweep_expired(
        now=h.services.clock.now() + timedelta(minutes=1))
    return n


async def _bring_to(h: Harness, a: Actor, status: Status, *, personal: bool = False,
                   watched: bool = False) -> str:
    """A fresh card whose first component is in ``status``; ``personal``: one Main may not
    take (a secret beside it), so the sweep keeps it open; ``watched``: posted while Max
    watched its thread (no carrier), and he has left since."""
    tid = await new_thread(a.user)
    questions = (CHOICE, SECRET) if personal else (CHOICE,)
    if watched:
        await h.services.presence.focus("walk", a.user_id, tid)
    _, content = await post_card(a.agent, tid, *questions)
    if watched:
        await h.services.presence.leave("walk", a.user_id)
    cid = str(content["components"][0]["id"])
    if status is Status.OPEN:
        return cid
    if status is Status.WITHDRAWN:
        code, body = await _agent_tool(a, tid, "withdraw_question",
                                       {"component_id": cid, "reason": "not needed"})
        assert code == 200, body
        return cid
    if status is Status.EXPIRED:
        await _expire(h, cid)
        return cid
    if status is Status.ANSWERED:
        await _ok(await a.user.post(f"/v1/components/{cid}/answer",
                                    json={"selected": ["keep"]}))
        return cid
    await _ok(await a.user.post(f"/v1/components/{cid}/to-main"))
    if status is Status.WITH_MAIN:
        return cid
    if status is Status.HANDED_BACK:
        code, body = await _main_tool(a, "hand_back", {"component_id": cid})
        assert code == 200, body
        return cid
    code, body = await _main_tool(a, "answer_for_max", {"component_id": cid,
                                                       "selected": ["keep"], "reason": "usual"})
    assert code == 200, body
    if status is Status.MAIN_ANSWERED:
        return cid
    assert status is Status.REVOKED
    await _ok(await a.user.post(f"/v1/components/{cid}/revoke"))
    return cid


async def _snapshot(h: Harness, a: Actor, cid: str) -> dict[str, Any]:
    """Everything a transition writes, as seen from the database."""
    async with h.services.db.connection() as conn:
        row = await conn.fetchrow(
            "SELECT c.status, c.answer, c.decision_id, m.display -> 'states' -> c.id AS mirror,"
            " (SELECT count(*) FROM component_audit WHERE component_id = c.id) AS audits,"
            # what a transition writes into threads (Main's own tool rows are not its doing)
            " (SELECT count(*) FROM messages WHERE user_id = c.user_id"
            "   AND role IN ('user', 'event')) AS messages,"
            " (SELECT count(*) FROM turns WHERE user_id = c.user_id) AS turns,"
            " (SELECT count(*) FROM push_outbox WHERE user_id = c.user_id) AS pushes,"
            " (SELECT status || coalesce(settled_via, '') FROM decisions d"
            "   WHERE d.id = c.decision_id) AS carrier"
            "  FROM message_components c JOIN messages m ON m.id = c.tool_message_id"
            " WHERE c.id = $1 AND c.user_id = $2::uuid", cid, a.user_id)
    assert row is not None
    return dict(row)


async def _request(h: Harness, a: Actor, t: Transition, cid: str) -> tuple[int, str | None]:
    """Make row ``t``'s request on ``cid``: (HTTP status, error code)."""
    if t.surface in (Surface.CARD, Surface.DECISION, Surface.PUSH) and t.name == "answer":
        if t.surface is Surface.CARD:
            resp = await a.user.post(f"/v1/components/{cid}/answer", json={"selected": ["keep"]})
        else:
            comp = (await a.user.get(f"/v1/components/{cid}")).json()
            assert comp["decision_id"] is not None  # the card was posted unwatched
            if t.surface is Surface.DECISION:
                resp = await a.user.post(f"/v1/decisions/{comp['decision_id']}/settle",
                                         json={"selected": ["keep"]})
            else:
                resp = await a.user.post("/v1/push/actions", json={
                    "decision_id": comp["decision_id"], "action": "opt:keep"})
        return resp.status_code, None if resp.status_code == 200 else resp.json()["code"]
    if t.name == "to-main" and t.surface is Surface.CARD:
        resp = await a.user.post(f"/v1/components/{cid}/to-main")
        return resp.status_code, None if resp.status_code == 200 else resp.json()["code"]
    if t.name == "revoke" and t.surface is Surface.PUSH:
        comp = (await a.user.get(f"/v1/components/{cid}")).json()
        resp = await a.user.post("/v1/push/actions", json={
            "decision_id": comp["decision_id"], "action": "revoke"})
        return resp.status_code, None if resp.status_code == 200 else resp.json()["code"]
    if t.name in ("revoke", "retract"):
        resp = await a.user.post(f"/v1/components/{cid}/{t.name}")
        return resp.status_code, None if resp.status_code == 200 else resp.json()["code"]
    if t.surface is Surface.MAIN:
        args: dict[str, Any] = {"component_id": cid}
        if t.name == "answer_for_max":
            args |= {"selected": ["keep"], "reason": "the usual choice"}
        code, body = await _main_tool(a, t.name, args)
        return code, None if code == 200 else body["code"]
    if t.surface is Surface.TOOL:
        tid = (await a.user.get(f"/v1/components/{cid}")).json()["thread_id"]
        code, body = await _agent_tool(a, tid, "withdraw_question",
                                       {"component_id": cid, "reason": "the plan changed"})
        return code, None if code == 200 else body["code"]
    if t.name == "expire":
        return (200, None) if await _expire(h, cid) == 1 else (409, "not_claimed")
    if t.name == "main-timeout":
        # Main's time is up whatever the card's status: only the table's from-state (and the
        # claim that spells it out) lets the sweep hand it back
        async with h.services.db.connection() as conn:
            await conn.execute("UPDATE message_components"
                               " SET main_due_at = now() - interval '1 minute' WHERE id = $1",
                               cid)
        n = await h.services.components.sweep_main_timeout(
            now=h.services.clock.now() + timedelta(minutes=1))
        return (200, None) if n == 1 else (409, "not_claimed")
    if t.name == "unwatched":
        n = await h.services.components.sweep_unwatched()
        return (200, None) if n == 1 else (409, "not_claimed")
    assert t.surface is Surface.SWEEP
    # the sweeper only claims due cards: make this one due whatever its status, so that only
    # the table's from-states keep it out
    async with h.services.db.connection() as conn:
        await conn.execute("UPDATE message_components SET due_at = now() - interval '1 minute'"
                           " WHERE id = $1", cid)
    result = await h.services.components.sweep_due(
        now=h.services.clock.now() + timedelta(minutes=1))
    if not any(result.values()):
        return 409, "not_claimed"
    moved = result["handed_to_main" if t.name == "to-main" else "kept_open"]
    return (200, None) if moved == 1 else (500, f"swept as {result}")


def _refusal(t: Transition, status: Status) -> str:
    return "not_claimed" if t.surface is Surface.SWEEP else t.refusal(status)


@pytest.mark.parametrize("status", list(Status), ids=str)
async def test_walk_the_table_from(harness: Harness, status: Status) -> None:
    a = await harness.actor("max")
    walked = []
    for t in TRANSITIONS:
        # the sweep keeps open only what Main may not take, and hands over only what it may
        cid = await _bring_to(harness, a, status,
                              personal=t.name == "keep-open" and status is Status.OPEN,
                              watched=t.name == "unwatched")
        before = await _snapshot(harness, a, cid)
        code, error = await _request(harness, a, t, cid)
        after = await _snapshot(harness, a, cid)
        label = f"{t.name} by {t.actor} from the {t.surface} in {status}"
        if t.idempotent and status is t.target:
            assert (code, error) == (200, None), label  # asked again: a no-op success
            assert after == before, f"{label}: a repeated request wrote something"
        elif t.allows(status):
            assert code == 200, (label, error)
            assert after["status"] == t.target, label
            assert after["mirror"]["status"] == t.target, label
            assert after["mirror"]["answerable_here"] is (t.target in {
                Status.OPEN, Status.REVOKED, Status.HANDED_BACK}), label
            expected_audits = 0 if t.target == status else 1  # keep-open changes no status
            assert after["audits"] == before["audits"] + expected_audits, label
            # each row's listed effects happened: one message per message-writing effect
            writes = {Effect.ANSWER_MESSAGE, Effect.HANDOFF_MESSAGE, Effect.REVOKE_EVENT,
                      Effect.EXPIRY_EVENT, Effect.ORIGIN_EVENT}
            told = int(Effect.TELL_MAIN in t.effects and status is Status.WITH_MAIN)
            assert after["messages"] - before["messages"] == (
                len(writes & set(t.effects)) + told), label
            if Effect.SETTLE_CARRIER in t.effects:
                assert after["carrier"] == f"settled{after['mirror']['answered_via']}", label
            if Effect.REOPEN_CARRIER in t.effects:
                assert after["carrier"] == "open", label
            if Effect.WITHDRAW_CARRIER in t.effects:
                assert after["carrier"] == f"settled{t.target}", label
            if Effect.ENSURE_CARRIER in t.effects:
                assert after["decision_id"] is not None, label
        else:
            assert (code, error) == (409, _refusal(t, status)), label
            assert after == before, f"{label}: a refused request wrote something"
        walked.append((t.key, status))
    assert len(walked) == len(TRANSITIONS)
