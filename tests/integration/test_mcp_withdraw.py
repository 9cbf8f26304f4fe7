"""``withdraw_question`` on both MCP servers (issue 28 item 4; docs/api.md: "Tools
``ask_user_question``, ``get_answers``, ``list_questions``, ``withdraw_question``" on ``maxclaw
mcp`` and ``/mcp``), driven by the official SDK's client against a real ``maxclaw serve``:
listed with REST's schema, it withdraws one question or a whole card, and a settled one is a
refusal (``409 settled``) in the model's words."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession

from tests.conftest import ServerProcess
from tests.integration.test_mcp import (
    CARD,
    answer_on_card,
    ask_and_check,
    http_session,
    new_thread,
    people,
    rest,
    serve,
    servers,  # noqa: F401 (fixture)
    stdio_session,
    structured,
)

pytestmark = pytest.mark.timeout(300)
TWO_QUESTIONS = {**CARD, "title": "Two", "questions": [
    *CARD["questions"], {"id": "notes", "kind": "text", "question": "Release notes?"}]}


async def rest_tools(base_url: str, token: str, thread: str) -> dict[str, Any]:
    async with rest(base_url, token) as http:
        resp = await http.get(f"/v1/agent/tools?thread_id={thread}")
    assert resp.status_code == 200, resp.text
    return {t["function"]["name"]: t["function"] for t in resp.json()["tools"]}


async def component(base_url: str, token: str, component_id: str) -> dict[str, Any]:
    async with rest(base_url, token) as http:
        resp = await http.get(f"/v1/components/{component_id}")
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


async def tool_rows(base_url: str, token: str, thread: str) -> list[Any]:
    """The contents of the thread's tool rows (what the model reads)."""
    async with rest(base_url, token) as http:
        rows = (await http.get(f"/v1/threads/{thread}/messages")).json()["messages"]
    return [r["content"] for r in rows if r["role"] == "tool"]


async def withdraw_round(session: ClientSession, srv: ServerProcess, who: Any,
                         thread: str) -> None:
    listed = {t.name: t for t in (await session.list_tools()).tools}
    offered = await rest_tools(srv.base_url, who.agent_token, thread)
    assert "withdraw_question" in listed
    assert listed["withdraw_question"].input_schema == offered["withdraw_question"]["parameters"]

    # one question by component id
    one = await ask_and_check(session)
    result = await session.call_tool("withdraw_question", {"component_id": one,
                                                           "reason": "found it in the docs"})
    assert result.is_error is False, result
    got = await component(srv.base_url, who.user_token, one)
    assert got["status"] == "withdrawn" and got["withdrawn_reason"] == "found it in the docs"

    # a whole card by its tool call id
    posted = structured(await session.call_tool("ask_user_question", TWO_QUESTIONS))
    ids = [c["id"] for c in posted["components"]]
    card_call = ids[0].rsplit(":", 1)[0]
    result = await session.call_tool("withdraw_question", {"tool_call_id": card_call,
                                                           "reason": "plan changed"})
    assert result.is_error is False, result
    for cid in ids:
        assert (await component(srv.base_url, who.user_token, cid))["status"] == "withdrawn"
    # the MCP result is the tool row the thread holds (one execute, two outlets)
    assert structured(result) in await tool_rows(srv.base_url, who.user_token, thread)
    cards = structured(await session.call_tool("list_questions", {}))["components"]
    assert {c["id"]: c["status"] for c in cards if c["id"] in ids} == dict.fromkeys(
        ids, "withdrawn")

    # a settled one: a refusal in the model's words, the card untouched
    answered = await ask_and_check(session)
    await answer_on_card(srv.base_url, who, answered, "yes")
    refused = await session.call_tool("withdraw_question", {"component_id": answered,
                                                            "reason": "moot"})
    assert refused.is_error is True
    content = structured(refused)
    assert "error" in content and "answered" in content["error"]
    assert (await component(srv.base_url, who.user_token, answered))["status"] == "answered"
    assert content in await tool_rows(srv.base_url, who.user_token, thread)


async def test_withdraw_question_over_stdio_and_http(
        database_url: str, tmp_path: Path, servers: list[ServerProcess]) -> None:  # noqa: F811
    srv = serve(servers, database_url, tmp_path)
    [max_] = await people(database_url, "max")
    over_stdio = await new_thread(srv.base_url, max_, title="stdio")
    async with stdio_session(srv.base_url, max_.agent_token, "--thread", over_stdio) as session:
        await withdraw_round(session, srv, max_, over_stdio)
    over_http = await new_thread(srv.base_url, max_, title="http")
    async with http_session(srv.base_url, max_.agent_token, over_http) as session:
        await withdraw_round(session, srv, max_, over_http)
