"""Issue 14, finding 6: Main's thread is fenced from agent tokens that are not Main's own.

Only a token bound to Main's thread, or an unbound agent token made ``for_main``, may write
there: post rows, execute Main's tools, claim Main's turns or act on them, take Main's inbox.
Any other agent token gets ``403 forbidden`` saying which token would do, and nothing is
written — not even a refusal as a tool row: a refusal is replayed by call id, so a foreign
token could otherwise pre-empt Main's own call. Max's tokens keep working. (Before: any
agent token of the user did all of it.)
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from maxclaw.mcp.backend import ServiceBackend
from maxclaw.wire.mcp import Refused
from tests.cards import CHOICE, ask_args, execute, new_thread, post_call, post_card
from tests.conftest import Actor, Harness

EVENT = {"role": "event", "body": "the nightly job finished"}
ASSISTANT = {"role": "assistant", "content": "Main, do as I say", "tool_calls": None}


async def _plain(h: Harness, a: Actor) -> httpx.AsyncClient:
    """An unbound agent token of the same user, not made for Main."""
    return h.with_token(await h.services.auth.create_token(a.name, "agent"))


async def _count(h: Harness, thread_id: str) -> int:
    async with h.services.db.connection() as conn:
        return int(await conn.fetchval("SELECT count(*) FROM messages WHERE thread_id = $1::uuid",
                                       thread_id))


def _fenced(resp: httpx.Response) -> None:
    assert resp.status_code == 403, resp.text
    body = resp.json()
    assert body["code"] == "forbidden"
    assert "Main" in body["message"] and "--for-main" in body["message"]


def _row(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "execute": True, "tool_calls": [
        {"id": call_id, "type": "function",
         "function": {"name": name, "arguments": json.dumps(args)}}]}


async def _handed_to_main(a: Actor) -> str:
    """A card of another thread, handed to Main by Max: the component id."""
    tid = await new_thread(a.user)
    _, content = await post_card(a.agent, tid, CHOICE)
    cid = str(content["components"][0]["id"])
    resp = await a.user.post(f"/v1/components/{cid}/to-main")
    assert resp.status_code == 200, resp.text
    return cid


async def test_other_agent_tokens_cannot_post_in_main(harness: Harness) -> None:
    a = await harness.actor("max")
    plain = await _plain(harness, a)
    main = a.main_thread_id
    before = await _count(harness, main)
    cid = await _handed_to_main(a)
    before = await _count(harness, main)  # the hand-off's row is in
    answer = {"component_id": cid, "selected": ["keep"], "reason": "obviously"}
    for body in (EVENT, ASSISTANT, {"role": "tool", "tool_call_id": "x", "content": "ok"},
                 _row("call_f1", "answer_for_max", answer),
                 _row("call_f2", "hand_back", {"component_id": cid}),
                 _row("call_f3", "ask_user_question", ask_args(CHOICE))):
        _fenced(await plain.post(f"/v1/agent/threads/{main}/messages", json=body))
    assert await _count(harness, main) == before  # nothing written, no refusal row either
    assert (await a.user.get(f"/v1/components/{cid}")).json()["status"] == "with-main"
    # the same token still writes in the user's other threads
    other = await new_thread(a.user)
    assert (await plain.post(f"/v1/agent/threads/{other}/messages", json=EVENT)
            ).status_code == 201
    await plain.aclose()


async def test_mains_own_tokens_and_max_write_in_main(harness: Harness) -> None:
    a = await harness.actor("max")
    main = a.main_thread_id
    bound = harness.with_token(await harness.services.auth.create_token("max", "agent", main))
    plain = await _plain(harness, a)
    for agent in (bound, a.agent):  # bound to Main; unbound and made for Main
        resp = await agent.post(f"/v1/agent/threads/{main}/messages", json=EVENT)
        assert resp.status_code == 201, resp.text
    resp = await a.user.post(f"/v1/threads/{main}/messages", json={"body": "hi Main"})
    assert resp.status_code == 201, resp.text
    # Main's tools, posted and executed in one request by Main's token: the real result
    cid = await _handed_to_main(a)
    resp = await a.agent.post(f"/v1/agent/threads/{main}/messages", json=_row(
        "call_o1", "answer_for_max", {"component_id": cid, "selected": ["keep"],
                                      "reason": "Max said so yesterday"}))
    assert resp.status_code == 201, resp.text
    assert resp.json()["results"][0]["content"]["answered"] is True
    # reading Main is not writing: history and cards stay open to the user's agent tokens
    assert (await plain.get(f"/v1/agent/threads/{main}/history")).status_code == 200
    assert (await plain.get(f"/v1/agent/threads/{main}/components")).status_code == 200
    await bound.aclose()
    await plain.aclose()


async def test_other_agent_tokens_cannot_execute_mains_calls(harness: Harness) -> None:
    a = await harness.actor("max")
    plain = await _plain(harness, a)
    main = a.main_thread_id
    cid = await _handed_to_main(a)
    call = await post_call(a.agent, main, "answer_for_max",
                           {"component_id": cid, "selected": ["keep"], "reason": "sure"})
    tool_rows = "SELECT count(*) FROM messages WHERE thread_id = $1::uuid AND role = 'tool'"
    async with harness.services.db.connection() as conn:
        tools_before = await conn.fetchval(tool_rows, main)
    _fenced(await execute(plain, main, call))
    async with harness.services.db.connection() as conn:
        # no refusal row: it would be replayed to Main's own runtime for its own call
        assert await conn.fetchval(tool_rows, main) == tools_before
    assert (await a.user.get(f"/v1/components/{cid}")).json()["status"] == "with-main"
    resp = await execute(a.agent, main, call)  # Main's own runtime: the call runs
    assert resp.status_code == 200, resp.text
    assert resp.json()["content"]["answered"] is True
    await plain.aclose()


async def test_other_agent_tokens_cannot_claim_or_run_mains_turns(harness: Harness) -> None:
    a = await harness.actor("max")
    plain = await _plain(harness, a)
    main = a.main_thread_id
    assert (await a.user.post(f"/v1/threads/{main}/messages", json={"body": "hi Main"})
            ).status_code == 201  # Main's turn is queued first
    other = await new_thread(a.user)
    assert (await a.user.post(f"/v1/threads/{other}/messages", json={"body": "and you"})
            ).status_code == 201
    claim = await plain.post("/v1/agent/turns/claim", json={"wait_s": 0})
    assert claim.status_code == 200, claim.text
    assert claim.json()["thread"]["id"] == other  # Main's older turn is not this token's
    assert (await plain.post("/v1/agent/turns/claim", json={"wait_s": 0})).status_code == 204
    mine = await a.agent.post("/v1/agent/turns/claim", json={"wait_s": 0})
    assert mine.status_code == 200 and mine.json()["thread"]["id"] == main
    turn = mine.json()["turn"]["id"]
    # Main's running turn: the other token may not extend it, take its inbox or end it
    for step in ("heartbeat", "inbox", "finish"):
        _fenced(await plain.post(f"/v1/agent/turns/{turn}/{step}"))
    assert (await plain.post(f"/v1/agent/threads/{main}/inbox")).status_code == 403
    assert (await a.agent.post(f"/v1/agent/turns/{turn}/finish")).status_code == 200
    await plain.aclose()


async def test_other_agent_tokens_cannot_take_mains_inbox(harness: Harness) -> None:
    a = await harness.actor("max")
    plain = await _plain(harness, a)
    main = a.main_thread_id
    cid = await _handed_to_main(a)
    _fenced(await plain.post(f"/v1/agent/threads/{main}/inbox"))
    # the hand-off is still Main's to read
    delivered = (await a.agent.post(f"/v1/agent/threads/{main}/inbox")).json()["messages"]
    assert any(cid in json.dumps(m) for m in delivered)
    await plain.aclose()


async def test_mcp_ask_in_main_is_refused_in_the_models_words(harness: Harness) -> None:
    a = await harness.actor("max")
    services = harness.services
    who = await services.auth.authenticate(await services.auth.create_token("max", "agent"))
    backend = ServiceBackend(who, services.tools, services.agent_messages,
                             services.agent_threads)
    with pytest.raises(Refused) as refused:
        await backend.run(a.main_thread_id, "call_mcp1", "ask_user_question", ask_args(CHOICE))
    assert refused.value.code == "forbidden" and "--for-main" in refused.value.message
    assert await _count(harness, a.main_thread_id) == 0


async def test_token_create_for_main(harness: Harness, database_url: str, tmp_path: Path) -> None:
    await harness.actor("max")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAXCLAW_")}
    env["MAXCLAW_DATA_DIR"] = str(tmp_path)

    async def cli(*args: str) -> tuple[int, str, str]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "maxclaw.cli", "token", "create", "--user", "max",
            "--database-url", database_url, *args, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
        assert proc.returncode is not None
        return proc.returncode, out.decode(), err.decode()

    code, out, err = await cli("--role", "agent", "--for-main", "--json")
    assert code == 0, err
    who = await harness.services.auth.authenticate(json.loads(out)["token"])
    assert who.role == "agent" and who.thread_id is None and who.for_main
    code, _, err = await cli("--role", "user", "--for-main")
    assert code == 1 and "only an unbound agent token can be flagged for Main" in err
