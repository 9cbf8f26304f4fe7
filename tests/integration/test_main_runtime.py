"""Main in the reference runtime (issue 31, item 1): the turns of Main's thread run under Main's
own prompt, and with the scripted model each rule has a case — Main reads the asking thread
and answers with a reason that cites it; Main hands back an irreversible card (and, were it to
try, the service refuses the answer in the model's words)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from maxclaw.client.http import AgentClient
from maxclaw.client.runtime.loop import AgentRuntime
from maxclaw.client.runtime.prompt import MAIN_PROMPT, SYSTEM_PROMPT
from maxclaw.client.runtime.scripted import Script, ScriptedModel
from maxclaw.client.runtime.workspace_tools import LocalTools
from tests.cards import CHOICE, post_card
from tests.conftest import Actor, Harness

PREFERENCE = "For every release: always keep compatibility for one version."
Runner = Callable[[Actor, Script], Any]


@pytest.fixture
async def main_runtime(harness: Harness, tmp_path: Any) -> AsyncIterator[Runner]:
    """Runs one turn of Main's thread with a Main-bound token and a scripted model."""
    made: list[AgentRuntime] = []

    async def run(actor: Actor, script: Script) -> tuple[ScriptedModel, Any]:
        token = await harness.services.auth.create_token(actor.name, "agent",
                                                         actor.main_thread_id)
        client = AgentClient("http://test", token,
                             transport=httpx.ASGITransport(app=harness.app))
        model = ScriptedModel(script)
        runtime = AgentRuntime(client, model, LocalTools(tmp_path), runtime_id="main-rt")
        made.append(runtime)
        report = await runtime.run_once()
        assert report is not None and report.thread_id == actor.main_thread_id
        return model, report

    yield run
    for runtime in made:
        await runtime.aclose()
        await runtime.client.aclose()


async def handed_over(a: Actor, *, said: str | None, **card: Any) -> tuple[str, str]:
    """A thread where Max said ``said``, a card asked there and handed to Main."""
    resp = await a.user.post("/v1/threads", json={"title": "Orders"})
    tid = str(resp.json()["id"])
    if said is not None:
        assert (await a.user.post(f"/v1/threads/{tid}/messages",
                                  json={"body": said})).status_code == 201
    _, content = await post_card(a.agent, tid, CHOICE, **card)
    cid = str(content["components"][0]["id"])
    assert (await a.user.post(f"/v1/components/{cid}/to-main")).status_code == 200
    return tid, cid


def calls_made(model: ScriptedModel) -> list[tuple[str, dict[str, Any]]]:
    """Every tool call the model sent, in order (from the last request's conversation)."""
    last = model.requests[-1]
    return [(c["function"]["name"], json.loads(c["function"]["arguments"]))
            for m in last if m.get("role") == "assistant" for c in m.get("tool_calls") or []]


async def test_main_reads_the_thread_and_answers_with_a_reason_that_cites_it(
        harness: Harness, main_runtime: Runner) -> None:
    a = await harness.actor("max")
    tid, cid = await handed_over(a, said=PREFERENCE)
    reason = f"In the Orders thread he wrote: {PREFERENCE!r}"
    script = Script.model_validate({"replies": [
        {"id": "read", "when": {"user_says": "Hand-off from"},
         "tool_calls": [{"name": "read_thread", "arguments": {"thread_id": tid}}]},
        {"id": "answer", "when": {"tool_says": PREFERENCE, "after": "read"},
         "tool_calls": [{"name": "answer_for_max", "arguments": {
             "component_id": cid, "selected": ["keep"], "reason": reason}}]},
    ], "default": {"content": "Answered the Orders question for Max."}})
    model, _ = await main_runtime(a, script)
    assert model.requests[0][0] == {"role": "system", "content": MAIN_PROMPT}
    assert [name for name, _ in calls_made(model)] == ["read_thread", "answer_for_max"]
    # the answer came after the read showed what he said
    answering = next(i for i, r in enumerate(model.requests)
                     if any(PREFERENCE in str(m.get("content")) for m in r
                            if m.get("role") == "tool"))
    assert answering >= 1
    got = (await a.user.get(f"/v1/components/{cid}")).json()
    assert (got["status"], got["answered_by"], got["main_reason"]) == (
        "main-answered", "main", reason)
    assert PREFERENCE in got["main_reason"]


def decide_by_what_he_said(tid: str, cid: str) -> Script:
    """One script, two branches on what read_thread returned: his stated preference → answer
    citing it; nothing he said about it → hand back (outside what he has said)."""
    return Script.model_validate({"replies": [
        {"id": "read", "when": {"user_says": "Hand-off from"},
         "tool_calls": [{"name": "read_thread", "arguments": {"thread_id": tid}}]},
        {"id": "answer", "when": {"tool_says": PREFERENCE, "after": "read"},
         "tool_calls": [{"name": "answer_for_max", "arguments": {
             "component_id": cid, "selected": ["keep"],
             "reason": f"In the Orders thread he wrote: {PREFERENCE!r}"}}]},
        {"id": "back", "when": {"tool_lacks": PREFERENCE, "after": "read"},
         "tool_calls": [{"name": "hand_back", "arguments": {
             "component_id": cid, "note": "He has said nothing that settles this."}}]},
    ], "default": {"content": "Done with the hand-off."}})


@pytest.mark.parametrize(("said", "status", "tool"), [
    (PREFERENCE, "main-answered", "answer_for_max"),
    ("Start the rename when you can.", "handed-back", "hand_back"),
])
async def test_main_answers_only_within_what_he_said(
        harness: Harness, main_runtime: Runner, said: str, status: str, tool: str) -> None:
    a = await harness.actor("max")
    tid, cid = await handed_over(a, said=said)
    model, _ = await main_runtime(a, decide_by_what_he_said(tid, cid))
    assert [name for name, _ in calls_made(model)] == ["read_thread", tool]
    assert (await a.user.get(f"/v1/components/{cid}")).json()["status"] == status


async def test_main_hands_back_an_irreversible_card(harness: Harness,
                                                   main_runtime: Runner) -> None:
    a = await harness.actor("max")
    tid, cid = await handed_over(a, said=PREFERENCE, stakes="irreversible")
    note = "Irreversible: guessing wrong cannot be undone, so this is his call."
    script = Script.model_validate({"replies": [
        {"id": "look", "when": {"user_says": ["Hand-off from", "Stakes: irreversible"]},
         "tool_calls": [{"name": "read_thread", "arguments": {"thread_id": tid}}]},
        {"id": "back", "when": {"after": "look"},
         "tool_calls": [{"name": "hand_back", "arguments": {"component_id": cid,
                                                             "note": note}}]},
    ], "default": {"content": "Handed the irreversible question back to Max."}})
    model, _ = await main_runtime(a, script)
    assert [name for name, _ in calls_made(model)] == ["read_thread", "hand_back"]
    got = (await a.user.get(f"/v1/components/{cid}")).json()
    assert (got["status"], got["main_reason"]) == ("handed-back", note)


async def test_an_answer_to_an_irreversible_card_is_refused_in_the_models_words(
        harness: Harness, main_runtime: Runner) -> None:
    a = await harness.actor("max")
    _, cid = await handed_over(a, said=None, stakes="irreversible")
    script = Script.model_validate({"replies": [
        {"id": "guess", "tool_calls": [{"name": "answer_for_max", "arguments": {
            "component_id": cid, "selected": ["drop"], "reason": "seems fine"}}]},
        {"id": "back", "when": {"tool_says": "cannot be undone", "after": "guess"},
         "tool_calls": [{"name": "hand_back", "arguments": {
             "component_id": cid, "note": "Refused as irreversible; his call."}}]},
    ]})
    model, _ = await main_runtime(a, script)
    assert [name for name, _ in calls_made(model)] == ["answer_for_max", "hand_back"]
    assert (await a.user.get(f"/v1/components/{cid}")).json()["status"] == "handed-back"


async def test_other_threads_keep_the_asking_agents_prompt(harness: Harness,
                                                          tmp_path: Any) -> None:
    a = await harness.actor("max")
    resp = await a.user.post("/v1/threads", json={"title": "Work"})
    tid = resp.json()["id"]
    await a.user.post(f"/v1/threads/{tid}/messages", json={"body": "Start"})
    token = await harness.services.auth.create_token(a.name, "agent", tid)
    client = AgentClient("http://test", token, transport=httpx.ASGITransport(app=harness.app))
    model = ScriptedModel(Script.model_validate({"replies": []}))
    runtime = AgentRuntime(client, model, LocalTools(tmp_path), runtime_id="rt")
    try:
        assert await runtime.run_once() is not None
    finally:
        await runtime.aclose()
        await client.aclose()
    assert model.requests[0][0] == {"role": "system", "content": SYSTEM_PROMPT}
