"""Helpers to post cards the way an agent runtime does (assistant row, then execute)."""

from __future__ import annotations

import itertools
from typing import Any

import httpx

_ids = itertools.count(1)

CHOICE = {"id": "q1", "kind": "choice", "question": "Keep the old field for one version?",
          "options": [{"id": "keep", "label": "Keep one version", "recommended": True},
                      {"id": "drop", "label": "Remove it now"}],
          "multiple": False, "allow_other": True}
TEXT = {"id": "q2", "kind": "text", "question": "Anything for the changelog?"}
SECRET = {"id": "q3", "kind": "secret", "question": "Paste the deploy token"}
OBJECT = {"id": "q4", "kind": "object", "question": "Apply this diff?",
          "object": {"type": "diff", "content": "--- a/x\n+++ b/x\n"},
          "actions": [{"id": "apply", "label": "Apply"}, {"id": "reject", "label": "Reject"}]}


def ask_args(*questions: dict[str, Any], **card: Any) -> dict[str, Any]:
    return {"title": card.pop("title", "Rename the status field"),
            "questions": list(questions) or [CHOICE], **card}


async def post_call(agent: httpx.AsyncClient, thread_id: str, name: str, args: Any,
                    call_id: str | None = None) -> str:
    """Post an assistant row carrying one tool call; returns the call id."""
    call_id = call_id or f"call_{next(_ids)}"
    resp = await agent.post(f"/v1/agent/threads/{thread_id}/messages", json={
        "role": "assistant", "content": None,
        "tool_calls": [{"id": call_id, "type": "function",
                        "function": {"name": name, "arguments": args}}]})
    assert resp.status_code == 201, resp.text
    return call_id


async def execute(agent: httpx.AsyncClient, thread_id: str, call_id: str) -> httpx.Response:
    return await agent.post(f"/v1/agent/threads/{thread_id}/tool-calls/{call_id}/execute")


async def post_card(agent: httpx.AsyncClient, thread_id: str, *questions: dict[str, Any],
                    **card: Any) -> tuple[str, dict[str, Any]]:
    """Ask a card; returns ``(call_id, tool result content)``."""
    call_id = await post_call(agent, thread_id, "ask_user_question", ask_args(*questions, **card))
    resp = await execute(agent, thread_id, call_id)
    assert resp.status_code == 200, resp.text
    return call_id, resp.json()["content"]


async def new_thread(user: httpx.AsyncClient, **fields: Any) -> str:
    resp = await user.post("/v1/threads", json={"title": fields.pop("title", "Work"), **fields})
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])
