"""A concurrent workload against a real ``maxclaw serve``: cards posted and executed (twice at
once, to race the idempotent execute), answers from every surface racing each other, Main's
hand-offs, answers, hand-backs and revokes, user messages, and an agent runtime claiming turns.

Every request's outcome is recorded. ``acked`` keeps what the server confirmed with a 2xx, so a
test can check that nothing confirmed was lost; ``server_errors`` keeps every 5xx that is not
``503 unavailable`` (api.md: no request may produce a 500).
"""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from collections import Counter
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

import httpx
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import WebSocketException

from maxclaw.db.database import connect
from tests.cards import CHOICE, OBJECT, SECRET, TEXT
from tests.reliability.support import Party, client

IRREVERSIBLE = {**CHOICE, "id": "q5"}
# (questions, card settings); the due-now cards are what the sweepers hand to Main
VARIANTS: list[tuple[list[dict[str, Any]], dict[str, Any]]] = [
    ([CHOICE], {}),
    ([CHOICE], {"main_after_minutes": 0}),
    ([CHOICE, TEXT], {"main_after_minutes": 0}),
    ([TEXT], {}),
    ([SECRET], {"main_after_minutes": 0}),
    ([OBJECT], {}),
    ([IRREVERSIBLE], {"stakes": "irreversible", "main_after_minutes": 0}),
    ([CHOICE, OBJECT], {}),
]
MAX_ANSWERS = ("answer_card", "answer_decision", "answer_push")
ANSWER_OPS = frozenset({"answer_card", "answer_decision", "answer_push", "answer_for_max"})
KINDS = {"q1": "choice", "q2": "text", "q3": "secret", "q4": "object", "q5": "choice"}


def answer_body(cid: str, rng: random.Random) -> dict[str, Any]:
    """A valid answer for the component (the planted secret is not used here)."""
    kind = KINDS[cid.rsplit(":", 1)[1]]
    if kind == "choice":
        return rng.choice([{"selected": ["keep"]}, {"selected": ["drop"], "text": "a note"},
                           {"selected": [], "text": f"other {rng.randrange(10**6)}"}])
    if kind == "object":
        return {"selected": [rng.choice(["apply", "reject"])]}
    return {"selected": [], "text": f"typed {rng.randrange(10**6)}"}


def push_action(cid: str, rng: random.Random) -> dict[str, Any]:
    body = answer_body(cid, rng)
    if body["selected"]:
        return {"action": f"opt:{body['selected'][0]}", "text": body.get("text")}
    return {"action": "other", "text": body["text"]}


@dataclass
class Outcomes:
    """What happened, request by request."""

    statuses: Counter[str] = field(default_factory=Counter)
    transport_errors: int = 0
    server_errors: list[str] = field(default_factory=list)
    acked: list[tuple[str, str]] = field(default_factory=list)
    answers_fired: int = 0
    posted_calls: int = 0
    message_ids: list[int] = field(default_factory=list)  # rows the server confirmed

    @property
    def requests(self) -> int:
        return sum(self.statuses.values()) + self.transport_errors


def _unavailable(resp: httpx.Response) -> bool:
    """``503 unavailable`` in api.md's shape: the one 5xx a database outage may give."""
    try:
        return resp.status_code == 503 and resp.json().get("code") == "unavailable"
    except ValueError:
        return False


class Workload:
    """One party's traffic. ``stop`` ends the loops; a dead server ends them too."""

    def __init__(self, base_url: str, party: Party, threads: list[str], paths: set[str],
                 rng: random.Random, *, max_cards: int) -> None:
        self.party = party
        self.threads = threads
        self.paths = paths
        self.rng = rng
        self.max_cards = max_cards
        self.user = client(base_url, party.user_token)
        self.agent = client(base_url, party.agent_token)
        self.out = Outcomes()
        self.stop = asyncio.Event()
        self.cards = 0

    async def close(self) -> None:
        await self.user.aclose()
        await self.agent.aclose()

    @property
    def has_push_actions(self) -> bool:
        return "/v1/push/actions" in self.paths

    @property
    def has_turns(self) -> bool:
        return "/v1/agent/turns/claim" in self.paths

    async def call(self, op: str, c: httpx.AsyncClient, method: str, url: str,
                   body: Any = None, ack: str | None = None) -> httpx.Response | None:
        """One request; a transport error (the server was killed) stops this workload."""
        if self.stop.is_set():
            return None
        if op in ANSWER_OPS:
            self.out.answers_fired += 1
        try:
            resp = await c.request(method, url, json=body)
        except httpx.TransportError:
            self.out.transport_errors += 1
            self.stop.set()
            return None
        self.out.statuses[f"{op}:{resp.status_code}"] += 1
        if resp.status_code >= 500 and not _unavailable(resp):
            self.out.server_errors.append(f"{method} {url} → {resp.status_code} {resp.text[:300]}")
        if ack is not None and 200 <= resp.status_code < 300:
            self.out.acked.append((op, ack))
        if op in ("post_row", "user_message") and resp.status_code == 201:
            self.out.message_ids.append(int(resp.json()["id"]))
        return resp

    # ----- the pieces -----

    async def post_card(self) -> list[str]:
        """Post an assistant row with one ask call and execute it (sometimes twice at once)."""
        questions, settings = self.rng.choice(VARIANTS)
        thread = self.rng.choice(self.threads)
        call_id = f"c{uuid.uuid4().hex[:12]}"
        args = {"title": f"Card {call_id}", "questions": questions, **settings}
        row = {"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function",
             "function": {"name": "ask_user_question", "arguments": json.dumps(args)}}]}
        resp = await self.call("post_row", self.agent, "POST",
                               f"/v1/agent/threads/{thread}/messages", row)
        if resp is None or resp.status_code != 201:
            return []
        self.out.posted_calls += 1
        url = f"/v1/agent/threads/{thread}/tool-calls/{call_id}/execute"
        cids = [f"{call_id}:{q['id']}" for q in questions]
        times = 2 if self.rng.random() < 0.3 else 1
        results = await asyncio.gather(*[
            self.call("execute", self.agent, "POST", url, ack=",".join(cids))
            for _ in range(times)])
        ok = [r for r in results if r is not None and r.status_code == 200]
        if len(ok) > 1 and ok[0].json() != ok[1].json():
            self.out.server_errors.append(f"two executes of {call_id} answered differently")
        return cids if ok else []

    async def answer(self, cid: str, surface: str, decision_id: int | None) -> None:
        if surface == "card":
            await self.call("answer_card", self.user, "POST", f"/v1/components/{cid}/answer",
                            answer_body(cid, self.rng), ack=cid)
        elif surface == "decision" and decision_id is not None:
            await self.call("answer_decision", self.user, "POST",
                            f"/v1/decisions/{decision_id}/settle", answer_body(cid, self.rng),
                            ack=cid)
        elif surface == "push" and decision_id is not None:
            await self.call("answer_push", self.user, "POST", "/v1/push/actions",
                            {"decision_id": decision_id, **push_action(cid, self.rng)}, ack=cid)

    async def main_tool(self, name: str, cid: str) -> None:
        """Main's ``answer_for_max`` or ``hand_back`` (assistant row, then execute)."""
        args: dict[str, Any] = {"component_id": cid}
        if name == "answer_for_max":
            body = answer_body(cid, self.rng)
            args.update(selected=body["selected"], text=body.get("text"), reason="best guess")
        call_id = f"m{uuid.uuid4().hex[:12]}"
        main = self.party.main_thread_id
        row = {"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function",
             "function": {"name": name, "arguments": json.dumps(args)}}]}
        resp = await self.call("post_row", self.agent, "POST", f"/v1/agent/threads/{main}/messages",
                               row)
        if resp is not None and resp.status_code == 201:
            await self.call(name, self.agent, "POST",
                            f"/v1/agent/threads/{main}/tool-calls/{call_id}/execute", ack=cid)

    async def decision_of(self, cid: str) -> int | None:
        resp = await self.call("get_component", self.user, "GET", f"/v1/components/{cid}")
        if resp is None or resp.status_code != 200:
            return None
        value = resp.json().get("decision_id")
        return int(value) if value is not None else None

    def surfaces(self) -> list[str]:
        return ["card", "decision", "push"] if self.has_push_actions else ["card", "decision"]

    async def race(self, cid: str) -> None:
        """Several surfaces at once; sometimes Max taps "let Main decide" in the middle."""
        decision_id = await self.decision_of(cid)
        jobs: list[Coroutine[Any, Any, Any]] = [
            self.answer(cid, self.rng.choice(self.surfaces()), decision_id)
            for _ in range(self.rng.randint(3, 8))]
        if self.rng.random() < 0.3:
            jobs.append(self.call("to_main", self.user, "POST", f"/v1/components/{cid}/to-main",
                                  ack=cid))
        await asyncio.gather(*jobs)

    async def main_story(self, cid: str) -> None:
        """to-main (or the sweep) → Main answers or hands back (racing the panel) → revoke →
        Max answers."""
        decision_id = await self.decision_of(cid)
        if self.rng.random() < 0.6:
            await self.call("to_main", self.user, "POST", f"/v1/components/{cid}/to-main", ack=cid)
        tool = "answer_for_max" if self.rng.random() < 0.7 else "hand_back"
        jobs = [self.main_tool(tool, cid)]
        if self.rng.random() < 0.4:
            jobs.append(self.answer(cid, self.rng.choice(self.surfaces()[1:]), decision_id))
        await asyncio.gather(*jobs)
        if self.rng.random() < 0.6:
            await self.call("revoke", self.user, "POST", f"/v1/components/{cid}/revoke", ack=cid)
        await asyncio.gather(*[self.answer(cid, s, decision_id)
                               for s in self.rng.sample(self.surfaces(), 2)])

    # ----- the loops -----

    async def card_worker(self) -> None:
        while not self.stop.is_set() and self.cards < self.max_cards:
            self.cards += 1
            cids = await self.post_card()
            for cid in cids:
                story = self.race if self.rng.random() < 0.5 else self.main_story
                await story(cid)

    async def old_worker(self, existing: list[str]) -> None:
        """Answers aimed at cards of earlier trials (open ones, and settled ones: must 409)."""
        for cid in self.rng.sample(existing, min(len(existing), 30)):
            if self.stop.is_set():
                return
            await (self.race(cid) if self.rng.random() < 0.5 else self.main_story(cid))

    async def message_worker(self) -> None:
        while not self.stop.is_set() and self.cards < self.max_cards:
            thread = self.rng.choice(self.threads)
            await self.call("user_message", self.user, "POST", f"/v1/threads/{thread}/messages",
                            {"body": "one more thing"}, ack=thread)
            await asyncio.sleep(0.05)  # pacing only: a person types slower than a loop

    async def runtime_worker(self) -> None:
        """An agent runtime: claim, take the inbox, finish (when the turns API is served)."""
        if not self.has_turns:
            return
        while not self.stop.is_set() and self.cards < self.max_cards:
            resp = await self.call("claim", self.agent, "POST", "/v1/agent/turns/claim",
                                   {"wait_s": 0, "runtime_id": "reliability"})
            if resp is None:
                return
            if resp.status_code != 200:
                await asyncio.sleep(0.05)  # pacing only: nothing is queued right now
                continue
            turn = resp.json()["turn"]["id"]
            await self.call("inbox", self.agent, "POST", f"/v1/agent/turns/{turn}/inbox")
            await self.call("finish", self.agent, "POST", f"/v1/agent/turns/{turn}/finish")


async def lost_acks(url: str, outcomes: list[Outcomes]) -> list[str]:
    """Everything the server confirmed must be in the database after the crash."""
    conn = await connect(url)
    try:
        status = {r["id"]: r["status"] for r in await conn.fetch(
            "SELECT id, status FROM message_components")}
        moves: Counter[tuple[str, str]] = Counter(
            (r["component_id"], r["to_status"]) for r in await conn.fetch(
                "SELECT component_id, to_status FROM component_audit"))
        messages: Counter[str] = Counter(r["thread_id"] for r in await conn.fetch(
            "SELECT thread_id::text FROM messages WHERE role = 'user' AND body = 'one more thing'"))
    finally:
        await conn.close()
    lost: list[str] = []
    sent: Counter[str] = Counter()
    wants = {"answer_for_max": "main-answered", "hand_back": "handed-back",
             "to_main": "with-main", "revoke": "revoked"}
    for out in outcomes:
        for op, key in out.acked:
            if op == "execute":
                lost += [f"posted {cid} is missing" for cid in key.split(",") if cid not in status]
            elif op in MAX_ANSWERS and status.get(key) != "answered":
                lost.append(f"{op} {key} was confirmed but the card is {status.get(key)}")
            elif op in wants and moves[(key, wants[op])] == 0:
                lost.append(f"{op} {key} was confirmed but never happened")
            elif op == "user_message":
                sent[key] += 1
    lost += [f"thread {t}: {n} messages confirmed, {messages[t]} stored"
             for t, n in sent.items() if messages[t] < n]
    return lost


class Watcher:
    """A user's WebSocket client that reconnects whenever it is cut off and resumes from the
    last cursor it received (api.md: after such a reconnect nothing is missed)."""

    def __init__(self, base_url: str, token: str) -> None:
        self.url = base_url.replace("http://", "ws://") + f"/v1/ws?token={token}"
        self.cursor: str | None = None
        self.seen: set[int] = set()
        self.connects = 0
        self.resyncs = 0
        self._news = asyncio.Event()

    async def run(self) -> None:
        """Until cancelled."""
        while True:
            try:
                async with ws_connect(self.url, open_timeout=5) as ws:
                    self.connects += 1
                    await ws.send(json.dumps({"op": "subscribe", "cursor": self.cursor,
                                              "threads": None}))
                    async for raw in ws:
                        self._take(json.loads(raw))
            except (OSError, TimeoutError, WebSocketException):
                pass  # cut off (server killed, database down): reconnect below
            await asyncio.sleep(0.2)  # a client's reconnect pacing, not a synchronisation

    def _take(self, frame: dict[str, Any]) -> None:
        kind = frame.get("type")
        if kind == "resync":  # the cursor is unknown: start again from a snapshot
            self.resyncs += 1
            self.cursor = None
            raise WebSocketException("resync")
        if kind in ("record.upsert", "synced"):
            self.cursor = frame["cursor"]
        if kind == "record.upsert" and frame["table"] == "messages":
            self.seen.add(int(frame["record"]["id"]))
            self._news.set()

    async def wait_seen(self, ids: set[int]) -> None:
        """Until every id in ``ids`` has arrived (wrap in a timeout)."""
        while not ids <= self.seen:
            self._news.clear()
            await self._news.wait()
