"""Planted secrets against a real server: a sensitive answer's plaintext may be read only through
the model-facing projections (claim, inbox, history), which open its sealed box. The agent then
echoes the secrets as a scripted runtime would — in its reply, in a tool call's arguments, in
a tool's output (URL-encoded and base64), in an event and in a new card's question — and those
rows must reach clients masked. Searched: every column of every table, every REST response a
user client can get, every WebSocket frame, every push (the webhook's raw requests and the log
adapter's lines), the server's log at DEBUG, PostgreSQL's own log, ``pg_dump`` of the database,
and the cluster's data directory byte by byte (``grep -a`` after a ``CHECKPOINT``; the cluster is
this test's own, so its files are readable). Answers that lose a race or fail validation must
leave no trace at all; API tokens must appear in no table, response, frame or log line either."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

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
        assert all(w in claim.text for w in winners), "the claim must carry the secrets"
        await _echo(agent, thread, claim.json()["turn"]["id"], winners)
        inbox = await agent.post(f"/v1/agent/turns/{claim.json()['turn']['id']}/inbox")
        assert inbox.status_code == 200 and winners[4] in inbox.text, inbox.text
        history = (await agent.get(f"/v1/agent/threads/{thread}/history")).text
        assert all(w in history for w in winners), "the agent runtime must get the secrets"
        # the echoes, each in the form the agent wrote it
        for form in (f"Deploying with {winners[0]}", f"--token={winners[1]}",
                     quote(winners[2], safe=""), b64(winners[3]), winners[4]):
            assert form in history, f"the model must read its own echo {form[:30]}…"
        assert not [s for s in losers if s in history], "a losing answer reached the model"
        # clients read the same rows masked, naming the card
        msgs = (await user.get(f"/v1/threads/{thread}/messages?limit=500")).json()["messages"]
        masked = [m for m in msgs if (m.get("source_meta") or {}).get("secretEcho")]
        assert len(masked) == 4, [m["role"] for m in masked]
        assert all("••••[card " in json.dumps(m, ensure_ascii=False) for m in masked)
    return winners, losers, texts


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode().rstrip("=")


async def _echo(agent: Any, thread: str, turn_id: int, winners: list[str]) -> None:
    """What a scripted runtime does with secrets it was given: uses and repeats them."""
    call = f"e{uuid.uuid4().hex[:10]}"
    card = f"c{uuid.uuid4().hex[:10]}"
    posts = [
        {"role": "assistant", "turn_id": turn_id, "content": f"Deploying with {winners[0]} now.",
         "tool_calls": [{"id": call, "type": "function", "function": {
             "name": "run_command",
             "arguments": json.dumps({"cmd": f"deploy --token={winners[1]}"})}}]},
        {"role": "tool", "turn_id": turn_id, "tool_call_id": call, "content": {
            "stdout": f"GET /deploy?token={quote(winners[2], safe='')} ok\n"
                      f"auth: Basic {b64(winners[3])}", "exit_code": 0}},
        {"role": "event", "body": json.dumps({"job": "deploy", "token": winners[4]})},
        {"role": "assistant", "turn_id": turn_id, "content": None, "tool_calls": [
            {"id": card, "type": "function", "function": {
                "name": "ask_user_question",
                "arguments": json.dumps({"title": "Confirm", "questions": [{
                    "id": "q1", "kind": "choice",
                    "question": f"Did {winners[0]} deploy to prod?",
                    "options": [{"id": "y", "label": "Yes"}, {"id": "n", "label": "No"}]}],
                    "main_after_minutes": 0})}}]},
    ]
    for body in posts:
        resp = await agent.post(f"/v1/agent/threads/{thread}/messages", json=body)
        assert resp.status_code == 201, resp.text
    resp = await agent.post(f"/v1/agent/threads/{thread}/tool-calls/{card}/execute")
    assert resp.status_code == 200, resp.text


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
                    rows.append(("messages.body", r["body"] or ""))
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
        async with asyncio.timeout(30):  # notify + withdraw for each of the five cards,
            await receiver.wait_total(11)  # and the notify of the card that quotes a secret
    finally:
        server.stop()
        await receiver.stop()
    rows, n_rows = await _dump_tables(url)
    dump, data_dir_hits = await _dump_and_grep(private_cluster, admin_url, url,
                                               [*winners, *[b64(w) for w in winners]])
    places: dict[str, list[str]] = {
        "REST responses": responses, "WebSocket frames": frames,
        "webhook requests": [r.decode("utf-8", "replace") for r in receiver.raw],
        "server log": log_path.read_text().splitlines(),
        "PostgreSQL log": private_cluster.log_text().splitlines(),
        "tables": [f"{table}: {text}" for table, text in rows],
        "pg_dump": dump.splitlines(),
        "data directory (grep -a)": data_dir_hits,
    }
    tokens = [v.user_token, v.agent_token]
    leaks = [f"{secret[:30]}… in {place}: {line[:200]}" for place, lines in places.items()
             for line in lines for secret in (*winners, *losers, *tokens) if secret in line]
    # positive control for the byte search: a marker written in plaintext is found
    assert "sealed-marker-ok" in dump, "pg_dump did not dump the messages table"
    leaks += [f"an unstorable secret answer was not refused: {u}" for u in UNSTORABLE_NOT_REFUSED]
    UNSTORABLE_NOT_REFUSED.clear()
    log_lines = len(places["server log"])
    sealed = sum(1 for table, text in rows if table == "message_secrets")
    record("secrets", secrets_planted=len(winners) + len(losers), winners=len(winners),
           losing_or_invalid=len(losers), rows_searched=n_rows, rest_responses=len(responses),
           frames=len(frames), webhook_requests=len(receiver.raw), log_lines=log_lines,
           pg_log_lines=len(places["PostgreSQL log"]), sealed_rows=sealed,
           pg_dump_lines=len(places["pg_dump"]), leaks=len(leaks))
    assert '"push (log adapter)"' in log_path.read_text(), "the log adapter logged no payload"
    assert frames, "no WebSocket frame was read"
    assert not leaks, "\n".join(leaks[:40])


async def _dump_and_grep(cluster: PrivateCluster, admin_url: str, url: str,
                         needles: list[str]) -> tuple[str, list[str]]:
    """``pg_dump`` of the database, then ``grep -a`` of every file in the cluster's data
    directory after a CHECKPOINT (tables, indexes, WAL). A plaintext marker row is written
    first: both searches must find it, or they could not find a secret either."""
    conn = await connect(url)
    try:
        await conn.execute("CREATE TABLE marker (t text); INSERT INTO marker VALUES "
                           "('sealed-marker-ok')")
    finally:
        await conn.close()
    admin = await connect(admin_url)
    try:
        await admin.execute("CHECKPOINT")
    finally:
        await admin.close()
    pg_dump = cluster.bin_path / "pg_dump"  # the wheel's own, the server's version
    dumped = await asyncio.to_thread(subprocess.run, [str(pg_dump), "--no-owner", url],
                                     check=True, capture_output=True, timeout=60)
    dump = dumped.stdout.decode("utf-8", "replace")
    hits: list[str] = []
    for needle in ["sealed-marker-ok", *needles]:
        grep = await asyncio.to_thread(
            subprocess.run, ["grep", "-a", "-r", "-l", "-F", needle, str(cluster.pgdata)],
            capture_output=True, timeout=120)
        found = grep.stdout.decode().splitlines()
        found = [f for f in found if not f.endswith("/log") and "/log/" not in f]
        if needle == "sealed-marker-ok":
            assert found, f"grep -a found no plaintext marker under {cluster.pgdata}"
        else:
            hits += [f"{needle[:30]}… in {f}" for f in found]
    return dump, hits
