"""One time format on the wire: every instant a client reads — REST bodies, WebSocket frames,
push payloads, the card states inside a tool row — is RFC 3339 in UTC with a ``Z``, so the same
instant is the same string everywhere (a client comparing strings sees no false change)."""

from __future__ import annotations

import re
from typing import Any

from tests.cards import CHOICE, post_card
from tests.realtime_support import live_server

INSTANT = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
ONE_FORM = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z$")


def instants(value: Any, path: str = "$") -> list[tuple[str, str]]:
    """Every string in ``value`` that is an RFC 3339 instant, with its JSON path."""
    if isinstance(value, dict):
        return [i for k, v in value.items() for i in instants(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [i for n, v in enumerate(value) for i in instants(v, f"{path}[{n}]")]
    if isinstance(value, str) and INSTANT.match(value):
        return [(path, value)]
    return []


def other_forms(found: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(p, v) for p, v in found if not ONE_FORM.match(v)]


def test_the_walker_tells_the_forms_apart() -> None:
    found = instants({"a": "2026-12-01T05:30:59.123456+00:00", "b": ["2026-12-01T05:30:59Z"],
                      "c": "not a time"})
    assert other_forms(found) == [("$.a", "2026-12-01T05:30:59.123456+00:00")]


async def test_rest_frames_and_push_payloads_spell_instants_one_way(database_url: str) -> None:
    async with live_server(database_url) as srv:
        max_ = await srv.user("max")
        resp = await max_.http.post("/v1/push/devices", json={"platform": "log"})
        assert resp.status_code in (200, 201), resp.text
        ws = await srv.client(max_.token)
        await ws.subscribe(None)
        resp = await max_.http.post("/v1/threads", json={"title": "Work"})
        thread_id = resp.json()["id"]
        call_id, content = await post_card(max_.agent, thread_id, CHOICE,
                                           main_after_minutes=0)
        cid = f"{call_id}:q1"
        # due at once: the sweep hands it to Main with a carrier (a decision, pushed); Max
        # then answers from the decisions panel
        await srv.services.components.sweep_due_all()
        open_now = (await max_.http.get("/v1/decisions")).json()["decisions"]
        carrier = next(d for d in open_now if d["component_id"] == cid)
        answered = await max_.http.post(f"/v1/decisions/{carrier['id']}/settle",
                                        json={"selected": ["keep"], "text": None})
        assert answered.status_code == 200, answered.text

        rest: dict[str, Any] = {"tool result": content, "answer": answered.json()}
        for name, url in {"threads": "/v1/threads",
                          "messages": f"/v1/threads/{thread_id}/messages",
                          "component": f"/v1/components/{cid}",
                          "decisions": "/v1/decisions?status=all",
                          "devices": "/v1/push/devices"}.items():
            got = await max_.http.get(url)
            assert got.status_code == 200, (url, got.text)
            rest[name] = got.json()
        history = await max_.agent.get(f"/v1/agent/threads/{thread_id}/history")
        assert history.status_code == 200, history.text
        rest["history"] = history.json()

        # frames until the answer's message arrived
        while not any(f.get("table") == "messages" and f["record"]["role"] == "user"
                      for f in ws.frames if f["type"] == "record.upsert"):
            await ws.recv()
        frames = {"hello": ws.hello, "frames": ws.frames}
        async with srv.services.db.connection() as conn:
            payloads = [r["payload"] for r in await conn.fetch(
                "SELECT payload FROM push_outbox WHERE user_id = $1::uuid", max_.user_id)]
        await ws.close()

    found_rest, found_ws = instants(rest), instants(frames)
    # the check is about something: the bodies hold instants of every kind we promise
    paths = " ".join(p for p, _ in found_rest)
    for field in ("created_at", "due_at", "posted_at", "answered_at", "answer_due_at"):
        assert field in paths, field
    assert any(p.endswith("server_time") for p, _ in found_ws)
    assert other_forms(found_rest) == []
    assert other_forms(found_ws) == []
    assert payloads, "the log device should have been pushed the carrier"
    assert other_forms(instants(payloads)) == []

    # the same instant is the same string over REST and over the socket
    decision = next(d for d in rest["decisions"]["decisions"] if d["component_id"] == cid)
    framed = [f["record"] for f in ws.frames if f["type"] == "record.upsert"
              and f["table"] == "decisions" and f["record"]["id"] == decision["id"]]
    assert framed and framed[-1]["created_at"] == decision["created_at"]
