"""No secret value reaches the log (issue 28, hygiene): now that every ``extra`` field a log
call passes is written, a secret answer's whole journey — posted from the card, from the
decisions panel, refused, handed to the agent, pushed through the ``log`` adapter — is run
with every MaxClaw logger at DEBUG, and the log output is searched for the plaintext and for
every token that was used. The log is not empty: what it keeps is there."""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from maxclaw.app import create_app
from maxclaw.logs import configure_logging
from tests.cards import SECRET, new_thread, post_card
from tests.conftest import Harness, app_settings

PLANTED = "tok_live_LOGS_5e4d3c2b1a09"


@pytest.fixture
def log_output(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.StringIO]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    configure_logging("DEBUG", json_output=True)
    yield stream
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
async def app_with_log_device(database_url: str) -> AsyncIterator[Harness]:
    app = create_app(app_settings(database_url, push_allow_log_devices=True))
    async with app.router.lifespan_context(app):
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")
        yield Harness(app=app, services=app.state.services, client=client)
        await client.aclose()
        await app.state.services.push.dispatcher.close()


async def test_no_secret_or_token_reaches_the_log(app_with_log_device: Harness,
                                                  log_output: io.StringIO) -> None:
    h = app_with_log_device
    a = await h.actor("max")
    assert (await a.user.post("/v1/push/devices", json={"platform": "log"})).status_code == 201
    tid = await new_thread(a.user)
    dispatcher = h.services.push.dispatcher
    answered = []
    for via in ("card", "decision"):
        _, content = await post_card(a.agent, tid, SECRET)
        cid = content["components"][0]["id"]
        await dispatcher.run_until_idle()
        if via == "card":
            resp = await a.user.post(f"/v1/components/{cid}/answer",
                                     json={"selected": [], "text": PLANTED})
        else:
            decision_id = (await a.user.get(f"/v1/components/{cid}")).json()["decision_id"]
            resp = await a.user.post(f"/v1/decisions/{decision_id}/settle",
                                     json={"selected": [], "text": PLANTED})
        assert resp.status_code == 200, resp.text
        # a second answer is refused; the refusal is logged without what it carried
        again = await a.user.post(f"/v1/components/{cid}/answer",
                                  json={"selected": [], "text": PLANTED})
        assert again.status_code == 409
        answered.append(cid)
    await dispatcher.run_until_idle()  # the withdraws
    # the agent is handed the plaintext (the one place it may go)
    claim = await a.agent.post("/v1/agent/turns/claim", json={"wait_s": 0})
    assert claim.status_code == 200 and PLANTED in claim.text
    ticket = (await a.user.post("/v1/ws-ticket")).json()["ticket"]
    await h.services.auth.revoke_token(await h.services.auth.authenticate(a.user_token),
                                       (await a.user.get("/v1/tokens")).json()["tokens"][0]["id"])
    assert (await a.user.get("/v1/me")).status_code == 401

    output = log_output.getvalue()
    lines = [json.loads(line) for line in output.splitlines()]
    assert lines, "nothing was logged"
    # what is logged is there: the log adapter's pushes (two cards, two withdraws) with ids
    pushed = [line for line in lines if line["logger"] == "maxclaw.push.log"]
    assert sorted(line["kind"] for line in pushed) == ["notify", "notify", "withdraw",
                                                       "withdraw"]
    assert all("outbox_id" in line and "payload" in line for line in pushed)
    for secret in (PLANTED, a.user_token, a.agent_token, ticket):
        assert secret not in output, secret[:8]
