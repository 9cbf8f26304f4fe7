"""The MCP server driven by the official SDK's own client (``mcp.ClientSession``): over stdio
against a real ``maxclaw mcp`` subprocess, and over streamable HTTP against real ``maxclaw
serve`` subprocesses — tools listed, a card asked, answered from the WebUI's REST call,
delivered once by ``get_answers``, nothing lost across a server restart or across replicas;
and the bad inputs (unknown tool, invalid arguments, another user's thread, a dead server).
``maxclaw inbox --format hook`` is run as an agent host runs it."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from openai.types.chat import ChatCompletionMessageParam
from pydantic import TypeAdapter

from maxclaw.auth.service import AuthService
from maxclaw.cards.definitions import card_args_schema
from maxclaw.db.database import Database
from tests.conftest import ServerProcess, free_port, start_server
from tests.local_http import LOCAL_TLS

MAXCLAW = str(Path(sys.executable).parent / "maxclaw")
# each test starts real servers and MCP subprocesses: seconds on an idle machine, but up to
# ~100 s were seen on the shared 2-core box at load 17, past the suite's 120 s default
pytestmark = pytest.mark.timeout(300)
CHAT_MESSAGE: TypeAdapter[ChatCompletionMessageParam] = TypeAdapter(ChatCompletionMessageParam)
CARD = {"title": "Release", "questions": [
    {"id": "ship", "kind": "choice", "question": "Ship 2.0 today?",
     "options": [{"id": "yes", "label": "Ship it", "recommended": True},
                 {"id": "no", "label": "Wait a week"}]}]}


@dataclass
class Person:
    name: str
    user_token: str
    agent_token: str


async def people(database_url: str, *names: str) -> list[Person]:
    """Users and tokens in the server's database, as ``maxclaw user/token create`` make them."""
    db = Database(database_url, min_size=1, max_size=2)
    await db.open()
    try:
        auth = AuthService(db)
        out = []
        for name in names:
            await auth.create_user(name)
            out.append(Person(name, await auth.create_token(name, "user"),
                              await auth.create_token(name, "agent")))
        return out
    finally:
        await db.close()


async def bound_token(database_url: str, name: str, thread_id: str) -> str:
    db = Database(database_url, min_size=1, max_size=2)
    await db.open()
    try:
        return await AuthService(db).create_token(name, "agent", thread_id)
    finally:
        await db.close()


def rest(base_url: str, token: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=base_url, timeout=15, verify=LOCAL_TLS,
                             headers={"Authorization": f"Bearer {token}"})


async def new_thread(base_url: str, who: Person, title: str = "Agent work",
                     kind: str = "normal") -> str:
    async with rest(base_url, who.user_token) as http:
        resp = await http.post("/v1/threads", json={"title": title, "kind": kind})
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


async def answer_on_card(base_url: str, who: Person, component_id: str, option: str) -> None:
    """What the WebUI sends when Max taps an option on the card."""
    async with rest(base_url, who.user_token) as http:
        resp = await http.post(f"/v1/components/{component_id}/answer",
                               json={"selected": [option], "text": None})
    assert resp.status_code == 200, resp.text
    assert resp.json()["status"] == "answered"


def structured(result: Any) -> Any:
    """A tool result's data; the text block carries the same JSON."""
    assert result.content and result.content[0].type == "text"
    assert json.loads(result.content[0].text) == result.structured_content
    return result.structured_content


def mcp_env(token: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAXCLAW_")}
    return {**env, "MAXCLAW_TOKEN": token, "MAXCLAW_LOG_JSON": "true"}


@asynccontextmanager
async def stdio_session(base_url: str, token: str, *args: str,
                        errlog: Any = sys.stderr) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(command=MAXCLAW, args=["mcp", "--url", base_url, *args],
                                   env=mcp_env(token))
    async with stdio_client(params, errlog=errlog) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        yield session


@asynccontextmanager
async def http_session(base_url: str, token: str,
                       thread_id: str | None) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {token}"}
    if thread_id is not None:
        headers["X-MaxClaw-Thread"] = thread_id
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http, \
            streamable_http_client(f"{base_url}/mcp", http_client=http) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        yield session


@pytest.fixture
def servers(database_url: str, tmp_path: Path) -> Iterator[list[ServerProcess]]:
    """Real ``maxclaw serve`` processes on this test's database (stopped at the end)."""
    started: list[ServerProcess] = []
    yield started
    for srv in started:
        srv.stop()


def serve(servers: list[ServerProcess], database_url: str, tmp_path: Path,
          port: int | None = None, env: dict[str, str] | None = None) -> ServerProcess:
    # these tests start several servers and MCP processes each; on a busy machine (the
    # 2-core CI box running the suite with -n auto) a start can take longer than 30 s
    srv = start_server(database_url, tmp_path / f"serve-{len(servers)}.log", port=port,
                       env=env, ready_within_s=90)
    servers.append(srv)
    return srv


async def ask_and_check(session: ClientSession) -> str:
    """Ask the card; returns its component id."""
    posted = structured(await session.call_tool("ask_user_question", CARD))
    assert posted["posted"] is True
    assert "not wait" in posted["note"] or "will not wait" in posted["note"]
    [component] = posted["components"]
    assert component["kind"] == "choice"
    assert component["answer_due_at"]
    return str(component["id"])


async def delivered_once(session: ClientSession, component_id: str) -> None:
    """get_answers hands over the answer once, then nothing; list_questions shows it seen."""
    first = await session.call_tool("get_answers", {})
    assert first.is_error is False
    messages = structured(first)["messages"]
    assert len(messages) == 1, messages
    assert messages[0]["role"] == "user"
    assert "Ship it" in messages[0]["content"]
    for message in messages:
        CHAT_MESSAGE.validate_python(message)  # the shape OpenAI's SDK defines
    assert structured(await session.call_tool("get_answers", {})) == {"messages": []}
    cards = structured(await session.call_tool("list_questions", {}))["components"]
    [card] = [c for c in cards if c["id"] == component_id]
    assert card["status"] == "answered"
    assert card["answer"] == {"selected": ["yes"], "text": None}
    assert card["seen_at"] is not None


# ---- stdio ---------------------------------------------------------------------------------

async def test_stdio_round_trip_survives_a_server_restart(database_url: str, tmp_path: Path,
                                                          servers: list[ServerProcess]) -> None:
    port = free_port()
    srv = serve(servers, database_url, tmp_path, port)
    [max_] = await people(database_url, "max")
    thread = await new_thread(srv.base_url, max_)
    async with stdio_session(srv.base_url, max_.agent_token, "--thread", thread) as session:
        listed = await session.list_tools()
        by_name = {t.name: t for t in listed.tools}
        assert set(by_name) == {"ask_user_question", "withdraw_question", "get_answers",
                                "list_questions"}
        # the schema the host shows its model is the one REST validates with
        assert by_name["ask_user_question"].input_schema == card_args_schema()
        component_id = await ask_and_check(session)
        assert structured(await session.call_tool("get_answers", {})) == {"messages": []}

        srv.stop()  # the MaxClaw server restarts between the ask and the answer
        srv = serve(servers, database_url, tmp_path, port)
        await answer_on_card(srv.base_url, max_, component_id, "yes")
        await delivered_once(session, component_id)

    # the same card in Max's timeline: one assistant call, one tool row, one answer
    async with rest(srv.base_url, max_.user_token) as http:
        rows = (await http.get(f"/v1/threads/{thread}/messages")).json()["messages"]
    assert [r["role"] for r in rows] == ["assistant", "tool", "user"]
    assert rows[0]["components"][0]["id"] == component_id
    # the model-facing history of the thread is valid Chat Completions input
    async with rest(srv.base_url, max_.agent_token) as http:
        history = (await http.get(f"/v1/agent/threads/{thread}/history")).json()["messages"]
    assert len(history) == 3
    for message in history:
        CHAT_MESSAGE.validate_python(message)


async def test_stdio_new_thread_and_refusals(database_url: str, tmp_path: Path,
                                            servers: list[ServerProcess]) -> None:
    srv = serve(servers, database_url, tmp_path)
    max_, eve = await people(database_url, "max", "eve")
    errors = (tmp_path / "mcp-stderr.txt").open("w+")
    async with stdio_session(srv.base_url, max_.agent_token, "--new-thread", "From MCP",
                             errlog=errors) as session:
        with pytest.raises(MCPError, match="Unknown tool"):
            await session.call_tool("delete_everything", {})
        bad = {"title": "Oops", "questions": [{"id": "q1", "kind": "choice",
                                               "question": "Which?", "options": []}]}
        refused = await session.call_tool("ask_user_question", bad)
        assert refused.is_error is True
        content = structured(refused)
        assert content["posted"] is False
        assert "arguments.questions.0.options" in content["error"]
        # nothing posted: the thread has no card
        assert structured(await session.call_tool("list_questions", {})) == {"components": []}
    errors.seek(0)
    assert "created thread" in errors.read()
    errors.close()

    async with rest(srv.base_url, max_.user_token) as http:
        threads = (await http.get("/v1/threads")).json()["threads"]
    [created] = [t for t in threads if t["title"] == "From MCP"]

    # another user's thread: eve's token cannot serve max's thread
    run = await run_cli("mcp", "--url", srv.base_url, "--thread", created["id"],
                        env={"MAXCLAW_TOKEN": eve.agent_token})
    assert run.code != 0 and "no such thread" in run.err and "Traceback" not in run.err
    # a user token is not an agent token
    run = await run_cli("mcp", "--url", srv.base_url, "--thread", created["id"],
                        env={"MAXCLAW_TOKEN": max_.user_token})
    assert run.code != 0 and "agent token" in run.err and "Traceback" not in run.err


async def test_stdio_dead_server_is_one_line_and_non_zero(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    run = await run_cli("mcp", "--url", dead, "--thread", "00000000-0000-0000-0000-000000000000",
                        env={"MAXCLAW_TOKEN": "not-checked"})
    assert run.code != 0
    lines = run.err.strip().splitlines()
    assert len(lines) == 1, run.err
    assert lines[0].startswith("maxclaw: mcp: cannot reach MaxClaw at " + dead)
    assert run.out == ""  # stdout is the MCP channel: nothing that is not MCP goes there


@dataclass
class Run:
    code: int
    out: str
    err: str


async def run_cli(*args: str, env: dict[str, str]) -> Run:
    proc = await asyncio.create_subprocess_exec(
        MAXCLAW, *args, env={**mcp_env(""), **env}, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode is not None
    return Run(proc.returncode, out.decode(), err.decode())


# ---- streamable HTTP -------------------------------------------------------------------------

def mcp_ready_lines(srv: ServerProcess) -> list[dict[str, Any]]:
    """The serve's log lines saying its /mcp endpoint (the SDK) is ready."""
    return [json.loads(line) for line in srv.log_path.read_text().splitlines()
            if '"the MCP endpoint is ready"' in line]


async def test_http_round_trip_across_replicas(
        database_url: str, tmp_path: Path, servers: list[ServerProcess]) -> None:
    # a loads the MCP SDK as it starts (MAXCLAW_MCP_PRELOAD, the default); b at its first
    # /mcp request: the same endpoint either way
    a = serve(servers, database_url, tmp_path, env={"MAXCLAW_MCP_PRELOAD": "true"})
    b = serve(servers, database_url, tmp_path, env={"MAXCLAW_MCP_PRELOAD": "false"})
    for _ in range(600):
        if mcp_ready_lines(a):
            break
        await asyncio.sleep(0.1)
    assert [line["preload"] for line in mcp_ready_lines(a)] == [True]
    assert mcp_ready_lines(b) == []  # ready (/readyz) with no SDK loaded
    [max_] = await people(database_url, "max")
    thread = await new_thread(a.base_url, max_)
    bound = await bound_token(database_url, "max", thread)

    async with http_session(a.base_url, max_.agent_token, thread) as on_a:
        tools = {t.name: t for t in (await on_a.list_tools()).tools}
        assert tools["ask_user_question"].input_schema == card_args_schema()
        component_id = await ask_and_check(on_a)
        # the same request sent again (same JSON-RPC id, same arguments) is the same card
        again = await resend_ask(a.base_url, max_.agent_token, thread, request_id=77)
        assert mcp_ready_lines(b) == []
        assert again == await resend_ask(b.base_url, max_.agent_token, thread, request_id=77)
        assert [line["preload"] for line in mcp_ready_lines(b)] == [False]
    a.stop()  # replica a goes away while the card waits: b serves the rest, nothing is lost
    await answer_on_card(b.base_url, max_, component_id, "yes")
    # a thread-bound token fixes the thread: no header needed
    async with http_session(b.base_url, bound, None) as on_b:
        await delivered_once(on_b, component_id)
        cards = structured(await on_b.call_tool("list_questions", {}))["components"]
        assert {c["id"] for c in cards} == {component_id, again}


async def resend_ask(base_url: str, token: str, thread: str, request_id: int) -> str:
    """One raw ``tools/call`` with a chosen JSON-RPC id (what a client's retry sends)."""
    body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
            "params": {"name": "ask_user_question",
                       "arguments": {**CARD, "title": "Resent"}}}
    async with httpx.AsyncClient(timeout=15) as http:
        resp = await http.post(f"{base_url}/mcp", json=body, headers={
            "Authorization": f"Bearer {token}", "X-MaxClaw-Thread": thread,
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2025-11-25"})
    assert resp.status_code == 200, resp.text
    content = resp.json()["result"]["structuredContent"]
    assert content["posted"] is True
    return str(content["components"][0]["id"])


async def test_http_refusals(database_url: str, tmp_path: Path,
                             servers: list[ServerProcess]) -> None:
    srv = serve(servers, database_url, tmp_path)
    max_, eve = await people(database_url, "max", "eve")
    thread = await new_thread(srv.base_url, max_)
    background = await new_thread(srv.base_url, max_, "Nightly", kind="background")

    async with httpx.AsyncClient(base_url=srv.base_url, timeout=15) as http:
        # no token, a user token, an unbound token that names no thread
        assert (await http.post("/mcp", json={})).status_code == 401
        user = await http.post("/mcp", json={},
                               headers={"Authorization": f"Bearer {max_.user_token}"})
        assert user.status_code == 403
        unnamed = await http.post("/mcp", json={},
                                  headers={"Authorization": f"Bearer {max_.agent_token}"})
        assert unnamed.status_code == 400 and "X-MaxClaw-Thread" in unnamed.json()["message"]

    # eve's token naming max's thread: the thread does not exist for her
    async with http_session(srv.base_url, eve.agent_token, thread) as session:
        refused = await session.call_tool("ask_user_question", CARD)
        assert refused.is_error is True
        assert structured(refused)["code"] == "not_found"
        assert structured(await session.call_tool("get_answers", {}))["code"] == "not_found"

    # a background thread is not offered ask_user_question: refused in the model's words
    async with http_session(srv.base_url, max_.agent_token, background) as session:
        refused = await session.call_tool("ask_user_question", CARD)
        assert refused.is_error is True
        assert structured(refused)["posted"] is False
    async with rest(srv.base_url, max_.agent_token) as http:
        history = (await http.get(f"/v1/agent/threads/{background}/history")).json()
    # the refused call has its tool row, so the conversation stays valid Chat Completions
    assert [m["role"] for m in history["messages"]] == ["assistant", "tool"]
    for message in history["messages"]:
        CHAT_MESSAGE.validate_python(message)


# ---- the command hook ------------------------------------------------------------------------

async def test_inbox_hook_delivers_once_and_is_silent_when_empty(
        database_url: str, tmp_path: Path, servers: list[ServerProcess]) -> None:
    srv = serve(servers, database_url, tmp_path)
    [max_] = await people(database_url, "max")
    thread = await new_thread(srv.base_url, max_)
    hook = ("inbox", "--url", srv.base_url, "--thread", thread, "--format", "hook")
    env = {"MAXCLAW_TOKEN": max_.agent_token}

    empty = await run_cli(*hook, env=env)
    assert (empty.code, empty.out) == (0, "")
    async with http_session(srv.base_url, max_.agent_token, thread) as session:
        component_id = await ask_and_check(session)
    await answer_on_card(srv.base_url, max_, component_id, "no")

    first = await run_cli(*hook, env=env)
    assert first.code == 0, first.err
    output = json.loads(first.out)
    assert output["hookSpecificOutput"]["hookEventName"] == "PostToolUse"
    assert "Wait a week" in output["hookSpecificOutput"]["additionalContext"]
    again = await run_cli(*hook, env=env)
    assert (again.code, again.out) == (0, "")
    as_json = await run_cli("inbox", "--url", srv.base_url, "--thread", thread, env=env)
    assert json.loads(as_json.out) == {"messages": []}
