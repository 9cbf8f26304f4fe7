"""Items of the contract (docs/api.md) an integrator builds on, each from the document's words
(issue 28): ``expires_after_minutes`` takes 1..43,200 whatever ``main_after_minutes`` is (item
2), and a WebSocket ticket is valid 60 s (item 10)."""

from __future__ import annotations

from datetime import datetime, timedelta

from tests.cards import CHOICE, new_thread, post_card
from tests.conftest import Harness


async def test_a_card_that_expires_before_it_is_due_posts_and_never_goes_to_main(
        harness: Harness) -> None:
    """"``expires_after_minutes`` (integer 1..43,200 or absent; at expiry an unsettled
    component becomes ``expired``)": ``{"expires_after_minutes": 10}`` with the default
    ``main_after_minutes`` of 30 posts; it expires first and simply never goes to Main, even
    when the sweeps run late, after both times."""
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    for card in ({"expires_after_minutes": 10},
                 {"expires_after_minutes": 1, "main_after_minutes": 10_080}):
        _, content = await post_card(a.agent, tid, CHOICE, **card)
        assert content["posted"] is True
        cid = content["components"][0]["id"]
        got = (await a.user.get(f"/v1/components/{cid}")).json()
        expires_at = datetime.fromisoformat(got["expires_at"])
        due_at = datetime.fromisoformat(got["due_at"])
        posted_at = datetime.fromisoformat(got["posted_at"])
        expected = timedelta(minutes=card["expires_after_minutes"])
        assert abs(expires_at - posted_at - expected) < timedelta(seconds=5)
        assert expires_at < due_at

        late = due_at + timedelta(minutes=5)  # both times passed before any sweep ran
        await harness.services.components.sweep_due(now=late)
        assert (await a.user.get(f"/v1/components/{cid}")).json()["status"] == "open"
        assert await harness.services.components.sweep_expired(now=late) == 1
        final = (await a.user.get(f"/v1/components/{cid}")).json()
        assert final["status"] == "expired"
        main = (await a.user.get(f"/v1/threads/{a.main_thread_id}/messages")).json()
        assert not [m for m in main["messages"] if cid in str(m["source_meta"])]
        async with harness.services.db.connection() as conn:
            assert await conn.fetchval(
                "SELECT count(*) FROM component_audit WHERE component_id = $1"
                " AND to_status = 'with-main'", cid) == 0


async def test_a_ws_ticket_is_valid_60_seconds(harness: Harness) -> None:
    """"``POST /v1/ws-ticket`` (user) → ``{"ticket", "expires_at"}``: single use, 60 s"."""
    a = await harness.actor("max")
    resp = await a.user.post("/v1/ws-ticket")
    assert resp.status_code == 200, resp.text
    expires_at = datetime.fromisoformat(resp.json()["expires_at"])
    async with harness.services.db.connection() as conn:
        now = await conn.fetchval("SELECT now()")
    assert timedelta(seconds=59) <= expires_at - now <= timedelta(seconds=61)
