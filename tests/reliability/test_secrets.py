"""Planted secrets against a real server: a sensitive answer's plaintext may live only in the
body of its one user message (served to agent runtimes only). Searched: every column of every
table, every REST response a user client can get, every WebSocket frame, every push (the
webhook's raw requests and the log adapter's lines), the server's log at DEBUG, and
PostgreSQL's own log. Answers that lose a race or fail validation must leave no trace at all;
API tokens must appear in no table, response, frame or log line either."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect as ws_connect

from maxclaw.db.database import connect
from maxclaw.db.urls import with_database
from tests.cards import CHOICE, SECRET
from tests.conftest import start_server
from tests.reliability.figures import record
from tests.reliability.receiver import Receiver
from tests.reliability.support import Party, PrivateCluster, client, provision

SERVER_ENV = {"MAXCLAW_LOG_LEVEL": "DEBUG", "MAXCLAW_PUSH_ALLOW_PRIVATE_URLS": "true",
              "MAXCLAW_SWEEP_INTERVAL_S": "0.5"}


UNSTORABLE_NOT_REFUSED: list[str] = []


def plant(what: str) -> str:
    return f"sk-{what}-{uuid.uuid4().hex}"


async def _secret_card(agent: Any, thread: str, with_choice: bool = False) -> str:
    call = f"s{uuid.uuid4().hex[:10]}"
    questions = [CHOICE, SECRET] if with_choice else [SECRET]
    resp = await agent.post(f"/v1/agent/threads/{thread}/messages", json={
        "role": "assistant", "content": None, "tool_calls": [
            {"id": call, "type": "function", "function": {
                "name": "ask_user_question",
                "arguments": json.dumps({"title": "Deploy", "questions": questions,
                                         "main_after_minutes": 0})}}]})
    assert resp.status_code == 201, resp.text
    assert (await agent.post(f"/v1/agent/threads/{thread}/tool-calls/{call}/execute")
            ).status_code == 200
    return f"{call}:q3"


async def _plant_secrets(base_url: str, v: Party) -> tuple[list[str], list[str], list[str]]:
    """Answer secret cards from every surface; returns (winners, losers, every response)."""
    winners, losers, texts = [], [], []
    # no keep-alive: after a 500 the server drops the connection, failing the next request
    async with client(base_url, v.user_token, keepalive=False) as user, \
            client(base_url, v.agent_token, keepalive=False) as agent:
        thread = (await user.post("/v1/threads", json={"title": "Ops"})).json()["id"]
        for surface in ("card", "decision", "push", "race", "card-with-choice"):
            cid = await _secret_card(agent, thread, with_choice=surface == "card-with-choice")
            decision = (await user.get(f"/v1/components/{cid}")).json()["decision_id"]
            too_long = plant("too-long") + "x" * 10_001
            losers.append(too_long[:40])
            resp = await user.post(f"/v1/components/{cid}/answer", json={"text": too_long})
            assert resp.status_code == 422, resp.text
            texts.append(resp.text)
            # text PostgreSQL cannot store (a NUL, an unpaired surrogate): refused, not echoed
            for bad in ("\\u0000", "\\udc00"):
                unstorable = plant("unstorable")
                losers.append(unstorable)
                resp = await user.post(
                    f"/v1/components/{cid}/answer",
                    content=('{"text": "' + unstorable + bad + '"}').encode(),
                    headers={"content-type": "application/json"})
                if not 400 <= resp.status_code < 500:
                    UNSTORABLE_NOT_REFUSED.append(f"{bad}: {resp.status_code} {resp.text}")
                texts.append(resp.text)
            if surface == "race":
                tries = [plant("race") for _ in range(8)]
                got = await asyncio.gather(*[
                    user.post(f"/v1/components/{cid}/answer", json={"text": s}) for s in tries])
                assert sorted(r.status_code for r in got) == [200] + [409] * 7
                winners += [s for s, r in zip(tries, got, strict=True) if r.status_code == 200]
                losers += [s for s, r in zip(tries, got, strict=True) if r.status_code != 200]
                texts += [r.text for r in got]
                continue
            secret = plant(surface)
            if surface == "decision":
                resp = await user.post(f"/v1/decisions/{decision}/settle", json={"text": secret})
            elif surface == "push":
                resp = await user.post("/v1/push/actions", json={
                    "decision_id": decision, "action": "other", "text": secret})
            else:
                resp = await user.post(f"/v1/components/{cid}/answer", json={"text": secret})
            assert resp.status_code == 200, resp.text
            winners.append(secret)
            texts.append(resp.text)
            late = plant("late")  # the card is settled: this one loses everywhere
            for late_resp in (
                    await user.post(f"/v1/components/{cid}/answer", json={"text": late}),
                    await user.post(f"/v1/decisions/{decision}/settle", json={"text": late}),
                    await user.post("/v1/push/actions", json={
                        "decision_id": decision, "action": "other", "text": late})):
                assert late_resp.status_code == 409, late_resp.text
                texts.append(late_resp.text)
            losers.append(late)
        # the model does get the plaintext: the positive control that the search can find it
        claim = await agent.post("/v1/agent/turns/claim", json={"wait_s": 0})
        assert claim.status_code == 200, claim.text
        history = (await agent.get(f"/v1/agent/threads/{thread}/history")).text
        assert all(w in history for w in winners), "the agent runtime must get the secrets"
    return winners, losers, texts


async def _every_user_response(base_url: str, v: Party) -> list[str]:
    """Every GET a user client can make, over every object it can see."""
    out = []
    async with client(base_url, v.user_token) as user:
        for path in ("/v1/me", "/v1/threads", "/v1/decisions?status=all",
                     "/v1/decisions", "/v1/push/devices", "/v1/push/config"):
            resp = await user.get(path)
            assert resp.status_code == 200, f"{path}: {resp.text}"
            out.append(resp.text)
        for thread in (await user.get("/v1/threads")).json()["threads"]:
            out.append((await user.get(f"/v1/threads/{thread['id']}")).text)
            messages = await user.get(f"/v1/threads/{thread['id']}/messages?limit=500")
            out.append(messages.text)
            for m in messages.json()["messages"]:
                for c in m.get("components") or []:
                    out.append((await user.get(f"/v1/components/{c['id']}")).text)
    return out


async def _dump_tables(url: str) -> tuple[list[tuple[str, str]], int]:
    """(table, row text) for every row of every table — minus the body of sensitive messages,
    which is returned apart — and how many rows were read."""
    rows: list[tuple[str, str]] = []
    n = 0
    conn = await connect(url)
    try:
        tables = [r["tablename"] for r in await conn.fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1")]
        for table in tables:  # names come from the catalogue, not from input
            query = (f'SELECT (to_jsonb(t) - \'body\')::text AS rest, t.body, t.sensitive'
                     f' FROM "{table}" t' if table == "messages"
                     else f'SELECT to_jsonb(t)::text AS rest FROM "{table}" t')
            for r in await conn.fetch(query):
                n += 1
                rows.append((table, r["rest"]))
                if table == "messages":
                    # a body may hold a secret only if the row is sensitive
                    rows.append(("messages.body" if not r["sensitive"] else "sensitive body",
                                 r["body"] or ""))
    finally:
        await conn.close()
    return rows, n


@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_planted_secrets_stay_in_their_one_body(private_cluster: PrivateCluster,
                                                      tmp_path: Path) -> None:
    admin_url = private_cluster.start()
    admin = await connect(admin_url)
    await admin.execute("CREATE DATABASE secrets")
    await admin.close()
    url = with_database(admin_url, "secrets")
    log_path = tmp_path / "serve.log"
    server = await asyncio.to_thread(start_server, url, log_path, None, SERVER_ENV)
    receiver = await Receiver().start()
    frames: list[str] = []
    try:
        (v,) = await provision(url, "max")
        async with client(server.base_url, v.user_token) as user:
            for device in ({"platform": "webhook", "url": receiver.url, "secret": "w" * 32},
                           {"platform": "log"}):
                assert (await user.post("/v1/push/devices", json=device)).status_code == 201
        ws_url = server.base_url.replace("http://", "ws://") + f"/v1/ws?token={v.user_token}"
        async with ws_connect(ws_url) as ws:
            await ws.send(json.dumps({"op": "subscribe", "cursor": None, "threads": None}))
            winners, losers, responses = await _plant_secrets(server.base_url, v)
            responses += await _every_user_response(server.base_url, v)
            # a marker change after everything: its frame closes the window of frames to read
            async with client(server.base_url, v.user_token) as user:
                marker = (await user.post("/v1/threads", json={"title": "the end"})).json()["id"]
            async with asyncio.timeout(30):
                while marker not in (frame := await ws.recv()):
                    frames.append(str(frame))
        async with asyncio.timeout(30):  # notify + withdraw for each of the five cards
            await receiver.wait_total(10)
    finally:
        server.stop()
        await receiver.stop()
    rows, n_rows = await _dump_tables(url)
    places: dict[str, list[str]] = {
        "REST responses": responses, "WebSocket frames": frames,
        "webhook requests": [r.decode("utf-8", "replace") for r in receiver.raw],
        "server log": log_path.read_text().splitlines(),
        "PostgreSQL log": private_cluster.log_text().splitlines(),
        "tables": [f"{table}: {text}" for table, text in rows if table != "sensitive body"],
    }
    tokens = [v.user_token, v.agent_token]
    leaks = [f"{secret[:30]}… in {place}: {line[:200]}" for place, lines in places.items()
             for line in lines for secret in (*winners, *losers, *tokens) if secret in line]
    # each winner exactly once, in one sensitive body; no loser in any body
    sensitive = [text for table, text in rows if table == "sensitive body"]
    leaks += [f"{w[:30]}… is in {sum(w in b for b in sensitive)} sensitive bodies, not 1"
              for w in winners if sum(w in b for b in sensitive) != 1]
    leaks += [f"losing answer {s[:30]}… was stored" for s in losers
              for b in sensitive if s in b]
    leaks += [f"an unstorable secret answer was not refused: {u}" for u in UNSTORABLE_NOT_REFUSED]
    UNSTORABLE_NOT_REFUSED.clear()
    log_lines = len(places["server log"])
    record("secrets", secrets_planted=len(winners) + len(losers), winners=len(winners),
           losing_or_invalid=len(losers), rows_searched=n_rows, rest_responses=len(responses),
           frames=len(frames), webhook_requests=len(receiver.raw), log_lines=log_lines,
           pg_log_lines=len(places["PostgreSQL log"]), leaks=len(leaks))
    assert '"push (log adapter)"' in log_path.read_text(), "the log adapter logged no payload"
    assert frames, "no WebSocket frame was read"
    assert not leaks, "\n".join(leaks[:40])
