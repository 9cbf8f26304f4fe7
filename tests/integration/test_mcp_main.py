"""Main over MCP (issue 31, item 2): a ``--for-main`` token on ``maxclaw mcp`` and a Main-bound
token on ``/mcp`` get ``answer_for_max``, ``hand_back``, ``read_thread`` and
``list_open_questions`` beside the others, driven by the official SDK's client against a real
``maxclaw serve``: Main reads the asking thread, answers one card, is refused an irreversible
one in the model's words and hands it back; the results are the tool rows Main's thread holds."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession

from maxclaw.auth.service import AuthService
from maxclaw.db.database import Database
from tests.conftest import ServerProcess
from tests.integration.test_mcp import (
    CARD,
    http_session,
    rest,
    serve,
    servers,  # noqa: F401 (fixture)
    stdio_session,
    structured,
)
from tests.integration.test_mcp_withdraw import component, rest_tools, tool_rows

pytestmark = pytest.mark.timeout(300)
MAIN_TOOLS = {"answer_for_max", "hand_back", "read_thread", "list_open_questions"}


@dataclass
class Household:
    user_token: str
    agent_token: str  # the asking agents' (unbound, not Main's)
    main_thread: str
    for_main: str  # unbound, flagged for Main
    main_bound: str  # bound to Main's thread


async def household(database_url: str, name: str) -> Household:
    db = Database(database_url, min_size=1, max_size=2)
    await db.open()
    try:
        auth = AuthService(db)
        _, main = await auth.create_user(name)
        return Household(await auth.create_token(name, "user"),
                         await auth.create_token(name, "agent"), main,
                         await auth.create_token(name, "agent", for_main=True),
                         await auth.create_token(name, "agent", main))
    finally:
        await db.close()


async def card_handed_to_main(base_url: str, h: Household, call_id: str,
                              **card: Any) -> tuple[str, str]:
    """A thread where Max said something, a card asked there and handed to Main."""
    async with rest(base_url, h.user_token) as user, rest(base_url, h.agent_token) as agent:
        resp = await user.post("/v1/threads", json={"title": f"Work {call_id}"})
        thread = str(resp.json()["id"])
        await user.post(f"/v1/threads/{thread}/messages",
                        json={"body": f"For {call_id}: I always ship on Fridays."})
        await agent.post(f"/v1/agent/threads/{thread}/messages", json={
            "role": "assistant", "content": None, "tool_calls": [
                {"id": call_id, "type": "function", "function": {
                    "name": "ask_user_question", "arguments": {**CARD, **card}}}]})
        done = await agent.post(f"/v1/agent/threads/{thread}/tool-calls/{call_id}/execute")
        assert done.status_code == 200, done.text
        cid = done.json()["content"]["components"][0]["id"]
        moved = await user.post(f"/v1/components/{cid}/to-main")
        assert moved.status_code == 200, moved.text
    return thread, str(cid)


async def main_round(session: ClientSession, srv: ServerProcess, h: Household, tag: str,
                     stranger: str) -> None:
    """``stranger``: a thread of another user, handed to that user's Main."""
    listed = {t.name: t for t in (await session.list_tools()).tools}
    assert set(listed) >= MAIN_TOOLS
    offered = await rest_tools(srv.base_url, h.for_main, h.main_thread)
    for name in MAIN_TOOLS:  # REST's schema, one definition for every outlet
        assert listed[name].input_schema == offered[name]["parameters"]
    assert listed["read_thread"].annotations.read_only_hint is True
    assert listed["answer_for_max"].annotations.read_only_hint is False

    thread, cid = await card_handed_to_main(srv.base_url, h, f"{tag}_normal")
    _, risky = await card_handed_to_main(srv.base_url, h, f"{tag}_risky",
                                         stakes="irreversible")
    open_ = structured(await session.call_tool("list_open_questions", {}))
    assert {cid, risky} <= {q["component_id"] for q in open_["questions"]}

    read = await session.call_tool("read_thread", {"thread_id": thread})
    assert read.is_error is False, read
    texts = [m["text"] for m in structured(read)["messages"]]
    assert f"For {tag}_normal: I always ship on Fridays." in texts

    answered = await session.call_tool("answer_for_max", {
        "component_id": cid, "selected": ["yes"],
        "reason": "He said in the thread: 'I always ship on Fridays.'"})
    assert answered.is_error is False, answered
    assert structured(answered) == {"answered": True, "component_id": cid}
    got = await component(srv.base_url, h.user_token, cid)
    assert (got["status"], got["answered_by"]) == ("main-answered", "main")

    refused = await session.call_tool("answer_for_max", {
        "component_id": risky, "selected": ["yes"], "reason": "a guess"})
    assert refused.is_error is True
    assert "cannot be undone" in structured(refused)["error"]
    back = await session.call_tool("hand_back", {"component_id": risky,
                                                 "note": "Irreversible: his call."})
    assert back.is_error is False, back
    assert structured(back) == {"handed_back": True, "component_id": risky}
    got = await component(srv.base_url, h.user_token, risky)
    assert (got["status"], got["main_reason"]) == ("handed-back", "Irreversible: his call.")
    rows = await tool_rows(srv.base_url, h.user_token, h.main_thread)
    for result in (read, answered, refused, back):
        assert structured(result) in rows  # one execute, two outlets

    # another user's thread: 404 in the model's words, the tool row written
    foreign = await session.call_tool("read_thread", {"thread_id": stranger})
    assert foreign.is_error is True and structured(foreign)["read"] is False
    assert structured(foreign) in await tool_rows(srv.base_url, h.user_token, h.main_thread)


async def test_main_answers_and_hands_back_over_stdio_and_http(
        database_url: str, tmp_path: Path, servers: list[ServerProcess]) -> None:  # noqa: F811
    srv = serve(servers, database_url, tmp_path)
    h = await household(database_url, "max")
    eve = await household(database_url, "eve")
    stranger, _ = await card_handed_to_main(srv.base_url, eve, "eve_card")
    async with stdio_session(srv.base_url, h.for_main, "--thread", h.main_thread) as session:
        await main_round(session, srv, h, "stdio", stranger)
    async with http_session(srv.base_url, h.main_bound, None) as session:
        await main_round(session, srv, h, "http", stranger)


async def test_an_asking_agents_token_gets_no_main_tools(
        database_url: str, tmp_path: Path, servers: list[ServerProcess]) -> None:  # noqa: F811
    srv = serve(servers, database_url, tmp_path)
    h = await household(database_url, "max")
    thread, cid = await card_handed_to_main(srv.base_url, h, "plain")
    async with http_session(srv.base_url, h.agent_token, thread) as session:
        names = {t.name for t in (await session.list_tools()).tools}
        assert not MAIN_TOOLS & names
        refused = await session.call_tool("answer_for_max", {
            "component_id": cid, "selected": ["yes"], "reason": "not mine to give"})
        assert refused.is_error is True
    assert (await component(srv.base_url, h.user_token, cid))["status"] == "with-main"
