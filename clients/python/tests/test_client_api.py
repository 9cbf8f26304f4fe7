"""``maxclaw_client`` against a real ``maxclaw serve``: the async client's round trip, the
typed errors a server's refusals become, and the tool schemas and dispatcher."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from maxclaw_client import (
    APIError,
    AsyncClient,
    AuthenticationError,
    Client,
    InvalidError,
    MaxClawError,
    NotFoundError,
    TransportError,
    anthropic_tools,
    arun_tool,
    openai_tools,
    run_tool,
)
from tests.conftest import ServerProcess, free_port
from tests.integration.test_mcp import new_thread, people, serve, servers

__all__ = ["servers"]
pytestmark = pytest.mark.timeout(300)


async def answer(base_url: str, user_token: str, component: str, option: str) -> None:
    async with httpx.AsyncClient(base_url=base_url, timeout=15, headers={
            "Authorization": f"Bearer {user_token}"}) as http:
        resp = await http.post(f"/v1/components/{component}/answer",
                               json={"selected": [option], "text": None})
    assert resp.status_code == 200, resp.text


async def test_async_round_trip_and_tool_dispatch(
        database_url: str, tmp_path: Path, servers: list[ServerProcess]) -> None:
    srv = serve(servers, database_url, tmp_path)
    [max_] = await people(database_url, "max")
    thread = await new_thread(srv.base_url, max_)
    async with AsyncClient(srv.base_url, max_.agent_token, thread) as maxclaw:
        assert await maxclaw.answers() == []
        asked = await maxclaw.ask("Which region?", options=["eu", "us"], call_id="region-1")
        again = await maxclaw.ask("Which region?", options=["eu", "us"], call_id="region-1")
        assert again.component_ids == asked.component_ids  # the same card, not a second
        await answer(srv.base_url, max_.user_token, asked.component_ids[0], "o2")
        [message] = await maxclaw.answers()
        assert "us" in message["content"]
        assert await maxclaw.answers() == []
        posted = await arun_tool(maxclaw, "ask_user_question", {
            "title": "Changelog", "questions": [{"id": "log", "kind": "text",
                                                  "question": "Anything for it?"}]})
        assert posted["posted"] is True
        listed = await arun_tool(maxclaw, "list_questions", {})
        assert [c["status"] for c in listed["components"]] == ["answered", "open"]
    with Client(srv.base_url, max_.agent_token, thread) as sync:
        assert run_tool(sync, "get_answers", None) == {"messages": []}
        with pytest.raises(ValueError, match="no MaxClaw tool"):
            run_tool(sync, "rm_rf", {})


async def test_refusals_are_typed_errors(
        database_url: str, tmp_path: Path, servers: list[ServerProcess]) -> None:
    srv = serve(servers, database_url, tmp_path)
    [max_] = await people(database_url, "max")
    thread = await new_thread(srv.base_url, max_)
    with Client(srv.base_url, "not-a-token", thread) as wrong, \
            pytest.raises(AuthenticationError) as refused:
        wrong.answers()
    assert refused.value.status == 401 and isinstance(refused.value, APIError)
    with Client(srv.base_url, max_.agent_token, thread) as maxclaw:
        with pytest.raises(InvalidError) as invalid:
            maxclaw.ask(questions=[{"id": "q", "kind": "choice", "question": "?",
                                    "options": []}], title="Broken")
        assert invalid.value.status == 422 and "options" in invalid.value.message
    with Client(srv.base_url, max_.agent_token, "00000000-0000-0000-0000-000000000000") as gone, \
            pytest.raises(NotFoundError):
        gone.questions()
    with Client(f"http://127.0.0.1:{free_port()}", max_.agent_token, thread) as away, \
            pytest.raises(TransportError) as unreachable:
        away.answers()
    assert isinstance(unreachable.value, MaxClawError)


def test_tool_schemas_are_plain_dicts_in_each_vendors_shape() -> None:
    names = {"ask_user_question", "get_answers", "list_questions", "withdraw_question"}
    openai = openai_tools()
    assert {t["function"]["name"] for t in openai} == names
    assert all(t["type"] == "function" and t["function"]["parameters"]["type"] == "object"
               for t in openai)
    anthropic = anthropic_tools()
    assert {t["name"] for t in anthropic} == names
    assert all(set(t) == {"name", "description", "input_schema"} for t in anthropic)
    ask = next(t for t in anthropic if t["name"] == "ask_user_question")
    assert ask["input_schema"]["required"] == ["title", "questions"]
