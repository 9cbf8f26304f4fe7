"""The MCP tool declarations a host (and the bridge's hosts) read: annotations, outputSchema
with the structured content matching it, and ``/mcp?thread_id=`` naming the thread."""

from __future__ import annotations

from pathlib import Path

import httpx2
import jsonschema
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import ServerProcess
from tests.integration.test_mcp import (
    CARD,
    answer_on_card,
    new_thread,
    people,
    serve,
    servers,
    structured,
)

__all__ = ["servers"]
pytestmark = pytest.mark.timeout(300)


async def test_tools_declare_hints_and_output_schemas_their_results_meet(
        database_url: str, tmp_path: Path, servers: list[ServerProcess]) -> None:
    srv = serve(servers, database_url, tmp_path)
    [max_] = await people(database_url, "max")
    thread = await new_thread(srv.base_url, max_)
    # no X-MaxClaw-Thread header and an unbound token: the URL's query names the thread
    headers = {"Authorization": f"Bearer {max_.agent_token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http, \
            streamable_http_client(f"{srv.base_url}/mcp?thread_id={thread}",
                                   http_client=http) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert tools["get_answers"].annotations.read_only_hint is True
        assert tools["list_questions"].annotations.read_only_hint is True
        assert tools["ask_user_question"].annotations.read_only_hint is False
        assert tools["ask_user_question"].annotations.idempotent_hint is True
        asked = structured(await session.call_tool("ask_user_question", CARD))
        await answer_on_card(srv.base_url, max_, asked["components"][0]["id"], "yes")
        answers = structured(await session.call_tool("get_answers", {}))
        cards = structured(await session.call_tool("list_questions", {}))
        # withdraw_question: a withdrawal, and a refusal (the answered question)
        other = structured(await session.call_tool("ask_user_question",
                                                   {**CARD, "title": "Other"}))
        withdrawn = structured(await session.call_tool("withdraw_question", {
            "component_id": other["components"][0]["id"], "reason": "not needed"}))
        refused = await session.call_tool("withdraw_question", {
            "component_id": asked["components"][0]["id"], "reason": "moot"})
    assert tools["withdraw_question"].annotations.destructive_hint is True
    assert withdrawn["withdrawn"] == [other["components"][0]["id"]]
    assert refused.is_error is True
    assert len(answers["messages"]) == 1
    for name, result in (("ask_user_question", asked), ("get_answers", answers),
                         ("list_questions", cards), ("withdraw_question", withdrawn),
                         ("withdraw_question", structured(refused))):
        schema = tools[name].output_schema
        assert schema is not None, name
        jsonschema.validate(result, schema)
