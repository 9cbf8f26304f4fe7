"""Every surface settles the same card, once; the carrier follows; one withdraw is queued."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from maxclaw.app import create_app
from tests.cards import CHOICE, execute, new_thread, post_call, post_card
from tests.conftest import Actor, Harness, app_settings


@pytest.fixture
async def push_harness(database_url: str) -> AsyncIterator[Harness]:
    """The app with webhook devices on loopback allowed (nothing is dispatched here)."""
    app = create_app(app_settings(database_url, push_allow_private_urls=True))
    async with app.router.lifespan_context(app):
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")
        yield Harness(app=app, services=app.state.services, client=client)
        await client.aclose()


async def prepared_card(h: Harness, a: Actor, with_main: bool) -> tuple[str, str, int]:
    device = await a.user.post("/v1/push/devices", json={
        "platform": "webhook", "url": "http://127.0.0.1:9/hook",
        "secret": "s3cret-webhook-key-0123"})
    assert device.status_code == 201, device.text
    tid = await new_thread(a.user)
    _, content = await post_card(a.agent, tid, CHOICE)
    cid = content["components"][0]["id"]
    if with_main:
        assert (await a.user.post(f"/v1/components/{cid}/to-main")).status_code == 200
    decision_id = (await a.user.get(f"/v1/components/{cid}")).json()["decision_id"]
    assert decision_id is not None
    return tid, cid, int(decision_id)


async def fire_all(a: Actor, cid: str, decision_id: int) -> dict[str, httpx.Response]:
    main_call = await post_call(a.agent, a.main_thread_id, "answer_for_max", {
        "component_id": cid, "selected": ["drop"], "reason": "cheaper"})
    surfaces: dict[str, Any] = {
        "card": a.user.post(f"/v1/components/{cid}/answer", json={"selected": ["keep"]}),
        "panel": a.user.post(f"/v1/decisions/{decision_id}/settle", json={"selected": ["drop"]}),
        "push-button": a.user.post("/v1/push/actions", json={
            "decision_id": decision_id, "action": "opt:keep"}),
        "push-other": a.user.post("/v1/push/actions", json={
            "decision_id": decision_id, "action": "other", "text": "neither, rename it"}),
        "main": execute(a.agent, a.main_thread_id, main_call),
    }
    results = await asyncio.gather(*surfaces.values())
    return dict(zip(surfaces, results, strict=True))


@pytest.mark.parametrize(("with_main", "round_"),
                         [(False, r) for r in range(4)] + [(True, r) for r in range(4)])
async def test_five_surface_race(push_harness: Harness, with_main: bool, round_: int) -> None:
    h = push_harness
    a = await h.actor(f"max{round_}")
    tid, cid, decision_id = await prepared_card(h, a, with_main)
    async with h.services.db.connection() as conn:  # the notification was delivered (shown)
        await conn.execute("UPDATE push_outbox SET status = 'sent', attempts = 1, sent_at = now()"
                           " WHERE decision_id = $1", decision_id)
    results = await fire_all(a, cid, decision_id)
    winners = [name for name, r in results.items() if r.status_code == 200]
    assert len(winners) == 1, {n: (r.status_code, r.text[:120]) for n, r in results.items()}
    for name, r in results.items():
        if name not in winners:
            assert r.status_code == 409, (name, r.text)
            assert r.json()["code"] in ("settled", "locked", "conflict"), (name, r.text)
    component = (await a.user.get(f"/v1/components/{cid}")).json()
    decision = next(d for d in (await a.user.get("/v1/decisions?status=all")).json()["decisions"]
                    if d["id"] == decision_id)
    assert component["status"] in ("answered", "main-answered")
    assert decision["status"] == "settled"
    assert decision["settled_via"] == component["answered_via"]
    expected_via = {"card": "card", "panel": "decision", "push-button": "push",
                    "push-other": "push", "main": "main"}[winners[0]]
    assert component["answered_via"] == expected_via
    msgs = (await a.user.get(f"/v1/threads/{tid}/messages")).json()["messages"]
    answers = [m for m in msgs if (m["source_meta"] or {}).get("componentAnswer")]
    assert len(answers) == 1
    async with h.services.db.connection() as conn:
        kinds = [(r["kind"], r["payload"]["kind"]) for r in await conn.fetch(
            "SELECT kind, payload FROM push_outbox WHERE decision_id = $1 ORDER BY id",
            decision_id)]
    # exactly one withdraw; when Main won, Max is then told what it answered (issue 16)
    told = [("notify", "main-answered")] if winners == ["main"] else []
    assert kinds == [("notify", "agent-question"), ("withdraw", "withdraw"), *told]
