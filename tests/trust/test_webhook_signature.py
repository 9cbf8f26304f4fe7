"""Webhook signatures (issue 28 item 8, issue 34's replay finding): a receiver written from
docs/api.md alone verifies real deliveries. The receiver is the document's own snippet, read
out of docs/api.md and run as written, so the document and the server cannot drift apart; a
webhook-driven bridge then answers the card with the payload's ``action_token`` (item 9)."""

from __future__ import annotations

import json
import re
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

from tests.cards import CHOICE, TEXT, new_thread, post_card
from tests.conftest import Harness
from tests.integration.push_fakes import Hit
from tests.integration.test_push_delivery import SECRET_KEY, push  # noqa: F401 (fixture)

API_MD = Path(__file__).resolve().parents[2] / "docs" / "api.md"
V2 = "X-MaxClaw-Signature-V2"


def receiver_snippet() -> dict[str, Any]:
    """The Python block that follows the V2 header's definition in docs/api.md, executed."""
    text = API_MD.read_text()
    after = text[text.index(f"`{V2}:"):]
    block = re.search(r"```python\n(.*?)```", after, re.DOTALL)
    assert block is not None, "docs/api.md lost its webhook receiver snippet"
    namespace: dict[str, Any] = {}
    exec(compile(textwrap.dedent(block.group(1)), str(API_MD), "exec"), namespace)
    return namespace


class Receiver:
    """A webhook receiver on 127.0.0.1 that answers 204 only to what the snippet verifies."""

    def __init__(self, verify: Callable[[str, str, bytes], bool]) -> None:
        self.verify = verify
        self.hits: list[Hit] = []
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def __aenter__(self) -> Receiver:
        app = web.Application()
        app.router.add_post("/hooks/maxclaw", self.handle)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}/hooks/maxclaw"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.runner is not None:
            await self.runner.cleanup()

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        ok = self.verify(SECRET_KEY, request.headers.get(V2, ""), body)
        status = 204 if ok else 401
        self.hits.append(Hit(request.path, dict(request.headers), body, status))
        return web.Response(status=status)


async def test_a_receiver_from_the_document_verifies_real_deliveries_and_answers(
        push: Harness) -> None:  # noqa: F811
    snippet = receiver_snippet()
    a = await push.actor("max")
    async with Receiver(snippet["verify"]) as receiver:
        resp = await a.user.post("/v1/push/devices", json={
            "platform": "webhook", "url": receiver.url, "secret": SECRET_KEY})
        assert resp.status_code == 201, resp.text
        tid = await new_thread(a.user, title="Refactor")
        _, content = await post_card(a.agent, tid, CHOICE, TEXT)
        assert await push.services.push.dispatcher.run_until_idle() == 2
    assert [h.status for h in receiver.hits] == [204, 204], receiver.hits
    payloads = [json.loads(h.body) for h in receiver.hits]
    for hit, payload in zip(receiver.hits, payloads, strict=True):
        fields = dict(part.split("=", 1) for part in hit.headers[V2].split(","))
        assert list(fields) == ["t", "d", "sha256"]
        assert abs(int(fields["t"]) - time.time()) < 60
        assert fields["d"] == str(payload["delivery_id"]) == hit.headers["Idempotency-Key"]
        # item 9: the payload carries an action token, as Web Push's and APNs' do
        assert payload["action_token"].startswith("mcpa_")
    # the bridge answers the choice card with its token alone: no bearer token anywhere
    choice = next(p for p in payloads if p["component_id"] == content["components"][0]["id"])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=push.app),
                                 base_url="http://test") as anonymous:
        answer = await anonymous.post("/v1/push/actions", json={
            "action_token": choice["action_token"], "action": "opt:keep", "text": None})
    assert answer.status_code == 200, answer.text
    component = (await a.user.get(f"/v1/components/{choice['component_id']}")).json()
    assert component["status"] == "answered" and component["answered_via"] == "push"


async def test_the_snippet_refuses_tampering_and_replays(
        push: Harness, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    snippet = receiver_snippet()
    verify, seen = snippet["verify"], snippet["seen"]
    a = await push.actor("max")
    # a receiver that accepts everything records what was sent; the snippet judges it after
    async with Receiver(lambda *_: True) as receiver:
        resp = await a.user.post("/v1/push/devices", json={
            "platform": "webhook", "url": receiver.url, "secret": SECRET_KEY})
        assert resp.status_code == 201, resp.text
        tid = await new_thread(a.user, title="Refactor")
        await post_card(a.agent, tid, CHOICE, TEXT)
        assert await push.services.push.dispatcher.run_until_idle() == 2
    assert len(receiver.hits) == 2
    for hit in receiver.hits:
        header = hit.headers[V2]
        t = re.search(r"\bt=(\d+)", header).group(1)  # type: ignore[union-attr]
        d = re.search(r"\bd=([^,]+)", header).group(1)  # type: ignore[union-attr]
        # another delivery id, another time, another body or another secret: refused
        assert not verify(SECRET_KEY, header.replace(f"d={d}", "d=999999"), hit.body)
        assert not verify(SECRET_KEY, header.replace(f"t={t}", f"t={int(t) - 10}"), hit.body)
        assert not verify(SECRET_KEY, header, hit.body + b" ")
        assert not verify("another secret", header, hit.body)
        for broken in ("", "sha256=00", f"t={t},sha256=00", "garbage", f"t=x,d={d},sha256=0"):
            assert not verify(SECRET_KEY, broken, hit.body)
        # the request as sent: accepted once; the same request again is a replay
        assert verify(SECRET_KEY, header, hit.body)
        assert not verify(SECRET_KEY, header, hit.body)
    # a genuine request replayed after the window: refused even by a receiver that forgot it
    seen.clear()
    hit = receiver.hits[0]
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + snippet["REPLAY_WINDOW_S"] + 1)
    assert not verify(SECRET_KEY, hit.headers[V2], hit.body)
