"""Issue 14, finding 6 (last part): every audit row names the API token that acted.

``component_audit.token_id`` is the token of the principal that moved the card — Max's user
token for his answers, hand-off and revoke, the Main runtime's token for Main's answer and
hand-back, the asking agent's token for a withdraw — and NULL where no API token acted (the
sweeper; a push action token, which is single-use and not an API token). Both ways an answer
is written carry it: the one-statement plain answer and the transaction of a guarded one.
(Before: the column existed and was always NULL.)"""

from __future__ import annotations

from datetime import timedelta

from maxclaw.push import action_token_store
from maxclaw.push.action_tokens import new_token
from tests.cards import CHOICE, execute, new_thread, post_call, post_card
from tests.conftest import Actor, Harness


async def _token_id(h: Harness, token: str) -> int:
    who = await h.services.auth.authenticate(token)
    assert who.token_id is not None
    return int(who.token_id)


async def _trail(h: Harness, cid: str) -> list[tuple[str, str, int | None]]:
    async with h.services.db.connection() as conn:
        return [(r["from_status"], r["to_status"], r["token_id"]) for r in await conn.fetch(
            "SELECT from_status, to_status, token_id FROM component_audit"
            " WHERE component_id = $1 ORDER BY id", cid)]


async def _card(a: Actor, **card: object) -> tuple[str, str]:
    tid = await new_thread(a.user)
    _, content = await post_card(a.agent, tid, CHOICE, **card)
    return tid, str(content["components"][0]["id"])


async def _main(a: Actor, name: str, args: dict[str, object]) -> None:
    call = await post_call(a.agent, a.main_thread_id, name, args)
    resp = await execute(a.agent, a.main_thread_id, call)
    assert resp.status_code == 200, resp.text


async def test_each_audit_row_names_the_token_that_acted(harness: Harness) -> None:
    a = await harness.actor("max")
    max_token = await _token_id(harness, a.user_token)
    main_token = await _token_id(harness, a.agent_token)
    # Max answers (the one-statement path)
    _, answered = await _card(a)
    resp = await a.user.post(f"/v1/components/{answered}/answer", json={"selected": ["keep"]})
    assert resp.status_code == 200, resp.text
    assert await _trail(harness, answered) == [("open", "answered", max_token)]
    # Max hands to Main, Main answers, Max revokes, Max answers from the panel
    _, handed = await _card(a)
    assert (await a.user.post(f"/v1/components/{handed}/to-main")).status_code == 200
    await _main(a, "answer_for_max", {"component_id": handed, "selected": ["keep"],
                                      "reason": "you always keep one"})
    assert (await a.user.post(f"/v1/components/{handed}/revoke")).status_code == 200
    decision = (await a.user.get(f"/v1/components/{handed}")).json()["decision_id"]
    settle = await a.user.post(f"/v1/decisions/{decision}/settle", json={"selected": ["drop"]})
    assert settle.status_code == 200, settle.text
    assert await _trail(harness, handed) == [
        ("open", "with-main", max_token), ("with-main", "main-answered", main_token),
        ("main-answered", "revoked", max_token), ("revoked", "answered", max_token)]
    # Main hands back; the asking agent (a token bound to its thread) withdraws
    tid, back = await _card(a)
    assert (await a.user.post(f"/v1/components/{back}/to-main")).status_code == 200
    await _main(a, "hand_back", {"component_id": back, "note": "yours"})
    bound = await harness.services.auth.create_token(a.name, "agent", tid)
    agent = harness.with_token(bound)
    call = await post_call(agent, tid, "withdraw_question", {"component_id": back,
                                                             "reason": "moot"})
    assert (await execute(agent, tid, call)).status_code == 200
    assert await _trail(harness, back) == [
        ("open", "with-main", max_token), ("with-main", "handed-back", main_token),
        ("handed-back", "withdrawn", await _token_id(harness, bound))]


async def test_the_sweeper_and_push_action_tokens_name_no_api_token(harness: Harness) -> None:
    a = await harness.actor("max")
    _, swept = await _card(a)
    services = harness.services
    await services.components.sweep_due(now=services.clock.now() + timedelta(days=1))
    assert await _trail(harness, swept) == [("open", "with-main", None)]
    _, expired = await _card(a, expires_after_minutes=5, main_after_minutes=None)
    assert await services.components.sweep_expired(
        now=services.clock.now() + timedelta(minutes=10)) == 1
    assert await _trail(harness, expired) == [("open", "expired", None)]
    # an answer by a push notification's action token: no API token acted
    device = await a.user.post("/v1/push/devices", json={"platform": "log"})
    assert device.status_code == 201, device.text
    _, tapped = await _card(a)
    decision = (await a.user.get(f"/v1/components/{tapped}")).json()["decision_id"]
    token, digest = new_token()
    async with services.db.connection() as conn:
        now = await conn.fetchval("SELECT now()")
        await action_token_store.mint(conn, user_id=a.user_id, decision_id=int(decision),
                                      device_id=int(device.json()["id"]), token_hash=digest,
                                      now=now, expires_at=now + timedelta(days=1))
    resp = await harness.with_token(None).post(
        "/v1/push/actions", json={"action_token": token, "action": "opt:keep"})
    assert resp.status_code == 200, resp.text
    assert await _trail(harness, tapped) == [("open", "answered", None)]
