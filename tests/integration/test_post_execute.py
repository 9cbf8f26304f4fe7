"""``POST …/messages`` with ``"execute": true``: the assistant row and the service's own tools
in one request and one transaction, with the same results (and idempotency on the tool call
id) as a post followed by ``execute``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from maxclaw.components import tool_store
from maxclaw.push.payload import build_payload
from tests.cards import CHOICE, SECRET, TEXT, ask_args, execute, new_thread, post_card
from tests.conftest import Harness, harness_for


@pytest.fixture(params=[False, True], ids=["hints-in-commit", "hints-after-commit"])
async def harness(database_url: str, request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    """Every test here twice: the post with ``execute`` and the answer are one statement each
    in autocommit by default, and a transaction each with MAXCLAW_HINTS_AFTER_COMMIT
    (``Database.writer``), whose races and refusals must come out the same."""
    async with harness_for(database_url, hints_after_commit=request.param) as h:
        yield h


def _row(*calls: tuple[str, str, Any], execute: Any = True) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "execute": execute,
            "tool_calls": [{"id": cid, "type": "function",
                            "function": {"name": name, "arguments": json.dumps(args)}}
                           for cid, name, args in calls]}


async def _post(agent: httpx.AsyncClient, tid: str, body: dict[str, Any]) -> httpx.Response:
    return await agent.post(f"/v1/agent/threads/{tid}/messages", json=body)


async def _counts(h: Harness, tid: str) -> tuple[int, int, int, int]:
    async with h.services.db.connection() as conn:
        row = await conn.fetchrow("""
            SELECT (SELECT count(*) FROM messages WHERE thread_id = $1::uuid
                     AND role = 'assistant') AS assistant,
                   (SELECT count(*) FROM messages WHERE thread_id = $1::uuid
                     AND role = 'tool') AS tool,
                   (SELECT count(*) FROM message_components WHERE thread_id = $1::uuid) AS comp,
                   (SELECT count(*) FROM decisions WHERE thread_id = $1::uuid) AS carriers""",
                                  tid)
    return tuple(row)  # type: ignore[return-value]


async def test_post_with_execute_posts_the_card_in_one_request(harness: Harness) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    resp = await _post(a.agent, tid, _row(("call_x1", "ask_user_question",
                                           ask_args(CHOICE, TEXT))))
    assert resp.status_code == 201, resp.text
    body = resp.json()
    assert isinstance(body["id"], int) and body["guard"] is None
    [result] = body["results"]
    assert result["tool_call_id"] == "call_x1" and result["status"] == 200
    assert result["error"] is None
    content = result["content"]
    assert content["posted"] is True and "not wait" in content["note"]
    assert [c["id"] for c in content["components"]] == ["call_x1:q1", "call_x1:q2"]
    assert await _counts(harness, tid) == (1, 1, 2, 2)  # not watching: carriers made
    # the same result the execute endpoint replays, and the card is answerable
    again = await execute(a.agent, tid, "call_x1")
    assert again.status_code == 200 and again.json()["content"] == content
    answered = await a.user.post("/v1/components/call_x1:q1/answer", json={"selected": ["keep"]})
    assert answered.status_code == 200, answered.text
    history = (await a.agent.get(f"/v1/agent/threads/{tid}/history")).json()["messages"]
    assistant = next(m for m in history if m["role"] == "assistant")
    assert assistant["tool_calls"][0]["id"] == "call_x1"
    assert any(m["role"] == "tool" and m["tool_call_id"] == "call_x1" for m in history)


async def test_a_retried_post_writes_nothing_and_replays(harness: Harness) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    body = _row(("call_r1", "ask_user_question", ask_args(CHOICE)))
    first = await _post(a.agent, tid, body)
    assert first.status_code == 201, first.text
    second = await _post(a.agent, tid, body)
    assert second.status_code == 201, second.text
    assert second.json() == first.json()
    assert await _counts(harness, tid) == (1, 1, 1, 1)


async def test_concurrent_identical_posts_write_one_row(harness: Harness) -> None:
    """Whichever way the race goes (the loser reads the winner's results, or its insert of the
    tool row hits the unique index and it replays), one row and one card are written."""
    a = await harness.actor("max")
    for n in range(4):
        tid = await new_thread(a.user)
        body = _row((f"call_c{n}", "ask_user_question", ask_args(CHOICE)))
        got = await asyncio.gather(*(_post(a.agent, tid, body) for _ in range(3)))
        assert [r.status_code for r in got] == [201] * 3, [r.text for r in got]
        assert len({json.dumps(r.json(), sort_keys=True) for r in got}) == 1
        assert await _counts(harness, tid) == (1, 1, 1, 1)


async def test_a_watched_thread_gets_no_carrier(harness: Harness) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    await harness.services.presence.focus("conn-x", a.user_id, tid)
    resp = await _post(a.agent, tid, _row(("call_w1", "ask_user_question", ask_args(CHOICE))))
    assert resp.status_code == 201, resp.text
    assert await _counts(harness, tid) == (1, 1, 1, 0)


async def test_refusals_are_results_and_written_like_execute(harness: Harness) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    bad = ask_args(CHOICE)
    bad["questions"][0] = {**CHOICE, "options": [CHOICE["options"][0]]}  # one option: invalid
    resp = await _post(a.agent, tid, _row(("call_b1", "ask_user_question", bad),
                                          ("call_b2", "read_file", {"path": "x"})))
    assert resp.status_code == 201, resp.text
    [result] = resp.json()["results"]  # the runtime's own tool is left to the runtime
    assert result["status"] == 422 and result["content"]["posted"] is False
    assert result["error"]["code"] == "invalid"
    assert await _counts(harness, tid) == (1, 1, 0, 0)  # the row and the refusal's tool row
    again = await execute(a.agent, tid, "call_b1")
    assert again.status_code == 422 and again.json()["content"] == result["content"]
    # a tool not offered in this thread: the row is written and the result is execute's 403
    bg = await new_thread(a.user, kind="background")
    resp = await _post(a.agent, bg, _row(("call_b3", "ask_user_question", ask_args(CHOICE))))
    assert resp.status_code == 201, resp.text
    [result] = resp.json()["results"]
    assert result["status"] == 403 and result["error"]["code"] == "forbidden"
    assert result["content"]["posted"] is False
    again = await execute(a.agent, bg, "call_b3")
    assert again.status_code == 403 and again.json()["code"] == "forbidden"
    # the refusal is its tool row too (issue 15: no tool call is left without a result)
    assert await _counts(harness, bg) == (1, 1, 0, 0)


async def test_main_tools_run_in_the_main_thread(harness: Harness) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    resp = await _post(a.agent, tid, _row(("call_m1", "ask_user_question", ask_args(CHOICE))))
    assert resp.status_code == 201, resp.text
    # not with Main: hand_back is refused with 409, and the refusal is its tool row
    resp = await _post(a.agent, a.main_thread_id, _row(
        ("call_m2", "hand_back", {"component_id": "call_m1:q1"})))
    assert resp.status_code == 201, resp.text
    [result] = resp.json()["results"]
    assert result["status"] == 409 and result["content"]["handed_back"] is False


async def test_execute_is_checked(harness: Harness) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    for body in (_row(("call_v1", "ask_user_question", ask_args(CHOICE)), execute="yes"),
                 {"role": "event", "body": "done", "execute": True}):
        resp = await _post(a.agent, tid, body)
        assert resp.status_code == 422, resp.text
        assert resp.json()["data"]["errors"][0]["loc"] == ["body", "execute"]
    assert await _counts(harness, tid) == (0, 0, 0, 0)
    # without it (or false), a post writes the row only
    resp = await _post(a.agent, tid, _row(("call_v2", "ask_user_question", ask_args(CHOICE)),
                                          execute=False))
    assert resp.status_code == 201 and "results" not in resp.json()
    assert await _counts(harness, tid) == (1, 0, 0, 0)
    # another user's thread is not found, and nothing is written
    b = await harness.actor("eve")
    resp = await _post(b.agent, tid, _row(("call_v3", "ask_user_question", ask_args(CHOICE))))
    assert resp.status_code == 404, resp.text
    assert await _counts(harness, tid) == (1, 0, 0, 0)


async def test_a_post_losing_the_race_at_the_unique_index_replays(
        harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """Deterministically: the read saw no result (as a racing post's read would), and the tool
    row's insert then meets the winner's row: the loser rolls back and replays the winner."""
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    body = _row(("call_u1", "ask_user_question", ask_args(CHOICE)))
    first = await _post(a.agent, tid, body)
    assert first.status_code == 201, first.text
    read = tool_store.post_context

    async def blind(*args: Any) -> Any:
        thread, _done, watching, live, prefs = await read(*args)
        return thread, [], watching, live, prefs

    monkeypatch.setattr(tool_store, "post_context", blind)
    second = await _post(a.agent, tid, body)
    assert second.status_code == 201, second.text
    assert second.json() == first.json()
    assert await _counts(harness, tid) == (1, 1, 1, 1)


async def _rows(h: Harness, sql: str, *args: Any) -> list[dict[str, Any]]:
    async with h.services.db.connection() as conn:
        return [dict(r) for r in await conn.fetch(sql, *args)]


async def test_one_statement_post_and_answer_queue_and_withdraw_pushes(harness: Harness) -> None:
    """The post's one statement queues each carrier's notification per device with the
    carrier's own id in the payload; the answer's one statement settles the carrier, cancels
    the notification never sent (no withdraw for it) and withdraws the one shown, writes the
    answer message and queues the thread's turn."""
    a = await harness.actor("max")
    for n in range(2):
        await _rows(harness, "INSERT INTO push_devices (user_id, platform, config)"
                             " VALUES ($1, 'log', $2) RETURNING id", a.user_id,
                    {"address": f"dev-{n}"})
    tid = await new_thread(a.user, title="Refactor")
    resp = await _post(a.agent, tid, _row(("call_p1", "ask_user_question", ask_args(CHOICE))))
    assert resp.status_code == 201, resp.text
    [decision] = await _rows(harness, "SELECT * FROM decisions WHERE thread_id = $1::uuid", tid)
    queued = await _rows(harness, "SELECT * FROM push_outbox ORDER BY id")
    assert [(r["kind"], r["decision_id"]) for r in queued] == [("notify", decision["id"])] * 2
    assert all(r["payload"] == build_payload({**decision, "thread_id": tid}, "Refactor")
               for r in queued)
    shown, unsent = queued
    await _rows(harness, "UPDATE push_outbox SET status = 'sent', attempts = 1 WHERE id = $1"
                         " RETURNING id", shown["id"])

    answered = await a.user.post("/v1/components/call_p1:q1/answer", json={"selected": ["keep"]})
    assert answered.status_code == 200, answered.text
    [settled] = await _rows(harness, "SELECT * FROM decisions WHERE id = $1", decision["id"])
    assert (settled["status"], settled["settled_via"]) == ("settled", "card")
    after = {r["id"]: r for r in await _rows(harness, "SELECT * FROM push_outbox")}
    assert after[unsent["id"]]["status"] == "dead"
    withdraws = [r for r in after.values() if r["kind"] == "withdraw"]
    assert [w["device_id"] for w in withdraws] == [shown["device_id"]]
    assert withdraws[0]["payload"] == {"v": 1, "kind": "withdraw",
                                       "collapse_id": "ask:call_p1:q1"}
    [message] = await _rows(harness, "SELECT * FROM messages WHERE thread_id = $1::uuid"
                                     " AND role = 'user'", tid)
    assert message["source_meta"]["componentAnswer"]["componentId"] == "call_p1:q1"
    [audit] = await _rows(harness, "SELECT * FROM component_audit WHERE component_id = $1",
                          "call_p1:q1")
    assert (audit["from_status"], audit["to_status"], audit["via"]) == ("open", "answered",
                                                                       "card")
    turns = await _rows(harness, "SELECT status FROM turns WHERE thread_id = $1::uuid", tid)
    assert [t["status"] for t in turns] == ["queued"]
    # a second answer loses the CAS and writes nothing
    again = await a.user.post("/v1/components/call_p1:q1/answer", json={"selected": ["drop"]})
    assert again.status_code == 409 and again.json()["code"] == "settled", again.text
    assert len(await _rows(harness, "SELECT id FROM push_outbox")) == 3
    assert len(await _rows(harness, "SELECT id FROM messages WHERE thread_id = $1::uuid"
                                    " AND role = 'user'", tid)) == 1


async def test_a_stale_turn_writes_nothing_and_the_running_one_posts(harness: Harness) -> None:
    """The one-statement post keeps the fencing token: a turn that is not the thread's
    running one is refused (409) and nothing is written; the running turn's post goes in."""
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    said = await a.user.post(f"/v1/threads/{tid}/messages", json={"body": "go"})
    assert said.status_code == 201, said.text
    claim = await a.agent.post("/v1/agent/turns/claim", json={"wait_s": 0, "runtime_id": "rt"})
    assert claim.status_code == 200, claim.text
    turn_id = claim.json()["turn"]["id"]
    stale = await _post(a.agent, tid, {**_row(("call_t1", "ask_user_question",
                                                ask_args(CHOICE))), "turn_id": turn_id + 1000})
    assert stale.status_code == 409, stale.text
    assert await _counts(harness, tid) == (0, 0, 0, 0)
    fresh = await _post(a.agent, tid, {**_row(("call_t1", "ask_user_question",
                                                ask_args(CHOICE))), "turn_id": turn_id})
    assert fresh.status_code == 201, fresh.text
    assert await _counts(harness, tid) == (1, 1, 1, 1)
    rows = await _rows(harness, "SELECT role, turn_id FROM messages WHERE thread_id = $1::uuid"
                                " AND role IN ('assistant', 'tool') ORDER BY id", tid)
    assert rows == [{"role": "assistant", "turn_id": turn_id}, {"role": "tool", "turn_id": turn_id}]


async def test_a_post_echoing_a_secret_is_sealed_and_executed(harness: Harness) -> None:
    """The echo check's rows come with the post's read; a row that echoes a live secret is
    stored masked and sensitive, its original sealed, and its card still posted."""
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    call_id, _ = await post_card(a.agent, tid, SECRET)
    planted = "sk-echo-0c7e51a9d2"
    resp = await a.user.post(f"/v1/components/{call_id}:q3/answer", json={"text": planted})
    assert resp.status_code == 200, resp.text
    body = {**_row(("call_e1", "ask_user_question", ask_args(CHOICE))),
            "content": f"Deploying with {planted} now."}
    posted = await _post(a.agent, tid, body)
    assert posted.status_code == 201, posted.text
    assert posted.json()["results"][0]["status"] == 200
    [row] = await _rows(harness, "SELECT id, body, sensitive FROM messages WHERE id = $1",
                        posted.json()["id"])
    assert row["sensitive"] is True and planted not in row["body"]
    kinds = await _rows(harness, "SELECT kind FROM message_secrets WHERE message_id = $1",
                        row["id"])
    assert kinds == [{"kind": "echo"}]
    assert len(await _rows(harness, "SELECT id FROM message_components WHERE id = $1",
                           "call_e1:q1")) == 1
