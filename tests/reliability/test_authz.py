"""The authorisation matrix: every endpoint of api.md crossed with {no token, bad token,
another user's token, an agent token on user endpoints, a user token on agent endpoints, a
thread-bound agent token on another thread, another user's agent token}, against a real server:
the status api.md says (401 / 403 / 404), api.md's error body, never a byte of the victim's
data, and no effect on the victim's objects. The same for WebSocket connections and
subscriptions."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

from maxclaw.db.database import connect
from tests.cards import CHOICE, SECRET
from tests.conftest import ServerProcess
from tests.reliability.figures import record
from tests.reliability.support import (
    Party,
    bound_agent_token,
    client,
    error_shape_problem,
    provision,
)


@dataclass(frozen=True)
class Endpoint:
    method: str
    path: str  # placeholders: {thread} {component} {decision} {device} {turn} {call}
    body: Any = None
    role: str = "user"

    @property
    def scoped(self) -> bool:
        """Whether it names one of the victim's objects (else it lists or creates)."""
        return "{" in self.path or re.search(r"\{[a-z]+\}", json.dumps(self.body)) is not None


USER = [
    Endpoint("GET", "/v1/me"),
    Endpoint("GET", "/v1/threads"),
    Endpoint("POST", "/v1/threads", {"title": "attacker thread"}),
    Endpoint("GET", "/v1/threads/{thread}"),
    Endpoint("GET", "/v1/threads/{thread}/messages"),
    Endpoint("POST", "/v1/threads/{thread}/messages", {"body": "attacker was here"}),
    Endpoint("GET", "/v1/components/{component}"),
    Endpoint("POST", "/v1/components/{component}/answer", {"selected": ["keep"]}),
    Endpoint("POST", "/v1/components/{component}/to-main"),
    Endpoint("POST", "/v1/components/{component}/revoke"),
    Endpoint("GET", "/v1/decisions?status=all"),
    Endpoint("POST", "/v1/decisions/{decision}/settle", {"selected": ["keep"]}),
    Endpoint("POST", "/v1/decisions/{decision}/snooze", {"minutes": 5}),
    Endpoint("POST", "/v1/push/devices", {"platform": "log"}),
    Endpoint("GET", "/v1/push/devices"),
    Endpoint("GET", "/v1/push/config"),
    Endpoint("DELETE", "/v1/push/devices/{device}"),
    Endpoint("POST", "/v1/push/actions", {"decision_id": "{decision}", "action": "opt:keep"}),
    Endpoint("POST", "/v1/tokens", {"role": "agent", "thread_id": "{thread}"}),
    Endpoint("GET", "/v1/tokens"),
    Endpoint("POST", "/v1/signin/codes", {}),
]
AGENT = [
    Endpoint("GET", "/v1/agent/tools?thread_id={thread}", role="agent"),
    Endpoint("POST", "/v1/agent/turns/claim", {"wait_s": 0, "runtime_id": "x"}, "agent"),
    Endpoint("POST", "/v1/agent/turns/{turn}/heartbeat", role="agent"),
    Endpoint("POST", "/v1/agent/turns/{turn}/inbox", role="agent"),
    Endpoint("POST", "/v1/agent/turns/{turn}/finish", role="agent"),
    Endpoint("GET", "/v1/agent/threads/{thread}/history", role="agent"),
    Endpoint("POST", "/v1/agent/threads/{thread}/messages",
             {"role": "event", "body": "attacker event"}, "agent"),
    Endpoint("POST", "/v1/agent/threads/{thread}/messages",
             {"role": "assistant", "content": "attacker says", "tool_calls": None}, "agent"),
    Endpoint("POST", "/v1/agent/threads/{thread}/tool-calls/{call}/execute", role="agent"),
]


@dataclass
class Victim:
    party: Party
    ids: dict[str, str]  # placeholder → the victim's id
    markers: list[str]  # strings that must never reach anyone else
    bound_token: str  # a victim agent token bound to another of its threads


async def _victim(server: ServerProcess) -> Victim:
    tag = uuid.uuid4().hex[:10]
    (v,) = await provision(server.database_url, f"victim-{tag}")
    async with client(server.base_url, v.user_token) as user, \
            client(server.base_url, v.agent_token) as agent:
        bound_home = (await user.post("/v1/threads", json={"title": f"home-{tag}"})).json()["id"]
        thread = (await user.post("/v1/threads", json={"title": f"victim-title-{tag}"})).json()
        tid = thread["id"]
        call = f"vcall{tag}"
        args = {"title": f"victim-card-{tag}", "questions": [
            {**CHOICE, "question": f"victim-question-{tag}"}, SECRET]}
        resp = await agent.post(f"/v1/agent/threads/{tid}/messages", json={
            "role": "assistant", "content": f"victim-assistant-{tag}", "tool_calls": [
                {"id": call, "type": "function",
                 "function": {"name": "ask_user_question", "arguments": json.dumps(args)}}]})
        assert resp.status_code == 201, resp.text
        assert (await agent.post(f"/v1/agent/threads/{tid}/tool-calls/{call}/execute")
                ).status_code == 200
        secret = f"victim-secret-{tag}"
        resp = await user.post(f"/v1/components/{call}:q3/answer", json={"text": secret})
        assert resp.status_code == 200, resp.text
        decision = (await user.get(f"/v1/components/{call}:q1")).json()["decision_id"]
        device = (await user.post("/v1/push/devices", json={"platform": "log"})).json()["id"]
        claim = await agent.post("/v1/agent/turns/claim", json={"wait_s": 0})
        assert claim.status_code == 200, claim.text
        assert claim.json()["thread"]["id"] == tid
    bound = await bound_agent_token(server.database_url, v.name, bound_home)
    ids = {"thread": tid, "component": f"{call}:q1", "decision": str(decision),
           "device": str(device), "turn": str(claim.json()["turn"]["id"]), "call": call}
    markers = [v.user_id, v.main_thread_id, tid, bound_home, call, v.name, f"victim-title-{tag}",
               f"victim-card-{tag}", f"victim-question-{tag}", f"victim-assistant-{tag}", secret]
    return Victim(v, ids, markers, bound)


def _fill(value: Any, ids: dict[str, str]) -> Any:
    text = json.dumps(value)
    for key, real in ids.items():
        text = text.replace(f'"{{{key}}}"', real if key == "decision" else json.dumps(real))
        text = text.replace(f"{{{key}}}", real)
    return json.loads(text)


async def _state(url: str, victim: Victim) -> dict[str, Any]:
    """What an attacker must not be able to change."""
    conn = await connect(url)
    try:
        row = await conn.fetchrow(
            "SELECT (SELECT status FROM message_components WHERE id = $1) AS component,"
            " (SELECT status || coalesce(bar_snoozed_until::text, '') FROM decisions"
            "   WHERE id = $2) AS decision,"
            " (SELECT count(*) FROM push_devices WHERE id = $3) AS devices,"
            " (SELECT status || coalesce(lease_until::text, '') || delivered_through::text"
            "   FROM turns WHERE id = $4) AS turn,"
            " (SELECT count(*) FROM messages WHERE user_id = $5::uuid) AS messages,"
            " (SELECT count(*) FROM threads WHERE user_id = $5::uuid) AS threads,"
            " (SELECT count(*) FROM api_tokens WHERE user_id = $5::uuid) AS tokens",
            victim.ids["component"], int(victim.ids["decision"]), int(victim.ids["device"]),
            int(victim.ids["turn"]), victim.party.user_id)
    finally:
        await conn.close()
    return dict(row)


def _expected(identity: str, ep: Endpoint) -> set[int]:
    """api.md's answer for one cell."""
    if identity in ("none", "bad"):
        return {401}
    caller_role = {"other_user": "user", "victim_user_on_agent": "user"}.get(identity, "agent")
    if caller_role != ep.role:
        return {403}
    if ep.scoped:
        return {404}
    if ep.path.endswith("/claim"):
        return {200, 204}  # its own turns only (checked below)
    return {200, 201}


@pytest.mark.slow
async def test_authorisation_matrix(server: ServerProcess) -> None:
    victim = await _victim(server)
    (attacker,) = await provision(server.database_url, f"attacker-{uuid.uuid4().hex[:8]}")
    tokens = {"none": None, "bad": "mc_u_" + "x" * 43, "other_user": attacker.user_token,
              "other_agent": attacker.agent_token, "victim_agent_on_user": victim.party.agent_token,
              "victim_user_on_agent": victim.party.user_token,
              "bound_agent_other_thread": victim.bound_token}
    cells: dict[str, list[tuple[str, Endpoint]]] = {
        "none": [(i, e) for i in ("none",) for e in USER + AGENT],
        "bad": [("bad", e) for e in USER + AGENT],
        "other_user": [("other_user", e) for e in USER + AGENT],
        "other_agent": [("other_agent", e) for e in USER + AGENT],
        "victim_agent_on_user": [("victim_agent_on_user", e) for e in USER],
        "victim_user_on_agent": [("victim_user_on_agent", e) for e in AGENT],
        "bound_agent_other_thread": [("bound_agent_other_thread", e) for e in AGENT + USER],
    }
    before = await _state(server.database_url, victim)
    problems: list[str] = []
    checked = 0
    for identity, cell in cells.items():
        async with client(server.base_url, tokens[identity]) as c:
            for _, ep in cell:
                url, body = _fill(ep.path, victim.ids), _fill(ep.body, victim.ids)
                resp = await c.request(ep.method, url, json=body)
                checked += 1
                want = _expected(identity, ep)
                where = f"{identity} {ep.method} {ep.path}"
                if resp.status_code not in want:
                    problems.append(f"{where}: {resp.status_code} (api.md: {sorted(want)}) "
                                    f"{resp.text[:200]}")
                if resp.status_code >= 400 and (shape := error_shape_problem(resp)):
                    problems.append(f"{where}: {shape}")
                leaked = [m for m in victim.markers if m in resp.text]
                if leaked:
                    problems.append(f"{where}: the response carries the victim's {leaked}")
                if ep.path.endswith("/claim") and resp.status_code == 200:
                    problems.append(f"{where}: claimed turn {resp.json()['turn']}")
    # the unauthenticated documents: probes, metrics, the OpenAPI document, the WebUI shell
    async with client(server.base_url, None) as anon:
        for path in ("/healthz", "/readyz", "/metrics", "/openapi.json", "/"):
            resp = await anon.get(path)
            checked += 1
            if resp.status_code != 200:
                problems.append(f"anonymous GET {path}: {resp.status_code}")
            leaked = [m for m in victim.markers if m in resp.text]
            if leaked:
                problems.append(f"anonymous GET {path} carries the victim's {leaked}")
    after = await _state(server.database_url, victim)
    if after != before:
        problems.append(f"the victim's objects changed: {before} → {after}")
    ws_checked, ws_problems = await _websocket_cells(server, victim, attacker)
    record("authz", http_cells=checked, websocket_cells=ws_checked,
           problems=len(problems) + len(ws_problems))
    assert not problems + ws_problems, "\n".join(problems + ws_problems)


# ----- WebSocket -----

def _ws_url(server: ServerProcess, token: str | None) -> str:
    base = server.base_url.replace("http://", "ws://") + "/v1/ws"
    return f"{base}?token={token}" if token else base


async def _close_code(url: str) -> int | None:
    async with ws_connect(url, open_timeout=10) as ws:
        try:
            async with asyncio.timeout(10):
                while True:
                    await ws.recv()
        except ConnectionClosed as closed:
            return closed.rcvd.code if closed.rcvd else None
    return None


async def _frames_until(ws: Any, done: Any) -> list[str]:
    frames = []
    async with asyncio.timeout(15):
        while True:
            frame = await ws.recv()
            frames.append(frame)
            if done(json.loads(frame)):
                return frames


async def _websocket_cells(server: ServerProcess, victim: Victim,
                           attacker: Party) -> tuple[int, list[str]]:
    problems: list[str] = []
    checked = 0
    for name, token, code in (("no token", None, 4401), ("bad token", "mc_u_" + "y" * 43, 4401),
                              ("agent token", victim.party.agent_token, 4403),
                              ("bound agent token", victim.bound_token, 4403)):
        got = await _close_code(_ws_url(server, token))
        checked += 1
        if got != code:
            problems.append(f"ws {name}: closed with {got}, api.md says {code}")
    v_threads = [victim.ids["thread"], victim.party.main_thread_id]
    async with client(server.base_url, attacker.user_token) as a_user, \
            client(server.base_url, victim.party.user_token) as v_user, \
            ws_connect(_ws_url(server, attacker.user_token)) as ws:
        a_thread = (await a_user.post("/v1/threads", json={"title": "mine"})).json()["id"]
        frames: list[str] = []
        for threads in (None, v_threads, [*v_threads, a_thread]):
            await ws.send(json.dumps({"op": "subscribe", "cursor": None, "threads": threads}))
            frames += await _frames_until(ws, lambda f: f.get("type") == "synced")
            checked += 1
        await ws.send(json.dumps({"op": "focus", "thread_id": victim.ids["thread"]}))
        focus = await _frames_until(ws, lambda f: f.get("type") in ("focus.ok", "error"))
        checked += 1
        if json.loads(focus[-1]).get("code") != "not_found":
            problems.append(f"ws focus on the victim's thread: {focus[-1]}")
        # live: the victim changes things, then the attacker does; the attacker's own frame
        # arriving means any frame about the victim's change would have arrived before it
        await v_user.post(f"/v1/threads/{victim.ids['thread']}/messages",
                          json={"body": f"live-{victim.markers[-1]}"})
        await v_user.post(f"/v1/decisions/{victim.ids['decision']}/snooze", json={"minutes": 1})
        mine = (await a_user.post(f"/v1/threads/{a_thread}/messages", json={"body": "me"})).json()
        frames += await _frames_until(ws, lambda f: (f.get("record") or {}).get("id") == mine["id"]
                                      and f.get("table") == "messages")
        checked += 1
    leaked = [m for m in victim.markers for f in frames if m in f]
    if leaked:
        problems.append(f"ws frames to another user carry the victim's {sorted(set(leaked))}")
    return checked, problems


async def test_a_bound_agent_token_claims_only_its_thread(server: ServerProcess) -> None:
    """A turn queued on another thread of the same user is never handed to a bound token."""
    (v,) = await provision(server.database_url, f"bound-{uuid.uuid4().hex[:8]}")
    async with client(server.base_url, v.user_token) as user:
        home = (await user.post("/v1/threads", json={"title": "home"})).json()["id"]
        other = (await user.post("/v1/threads", json={"title": "other"})).json()["id"]
        assert (await user.post(f"/v1/threads/{other}/messages",
                                json={"body": "work"})).status_code == 201
    bound = await bound_agent_token(server.database_url, v.name, home)
    async with client(server.base_url, bound) as agent:
        resp = await agent.post("/v1/agent/turns/claim", json={"wait_s": 1})
        assert resp.status_code == 204, resp.text
        assert (await agent.get(f"/v1/agent/threads/{other}/history")).status_code == 404
        assert (await agent.get(f"/v1/agent/threads/{home}/history")).status_code == 200
    async with client(server.base_url, v.agent_token) as agent:
        resp = await agent.post("/v1/agent/turns/claim", json={"wait_s": 0})
        assert resp.status_code == 200, resp.text
        assert resp.json()["thread"]["id"] == other
    record("authz", http_cells=4)


async def test_requests_carry_no_cross_user_ids_in_lists(server: ServerProcess) -> None:
    """A fresh user's lists are empty of everyone else (one more user, after others wrote)."""
    (a,) = await provision(server.database_url, f"lonely-{uuid.uuid4().hex[:8]}")
    async with httpx.AsyncClient(base_url=server.base_url,
                                 headers={"Authorization": f"Bearer {a.user_token}"}) as c:
        threads = (await c.get("/v1/threads")).json()["threads"]
        assert [t["id"] for t in threads] == [a.main_thread_id]
        assert (await c.get("/v1/decisions?status=all")).json()["decisions"] == []
        assert (await c.get("/v1/push/devices")).json()["devices"] == []
