"""Snapshot + the frames received == a fresh REST fetch, after every kind of action; the thread
filter; and what a client must never receive (another user's records, a secret body)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from maxclaw.timeline import store as timeline_store
from tests.cards import CHOICE, SECRET, TEXT, execute, new_thread, post_call, post_card
from tests.realtime_support import (
    LiveServer,
    State,
    User,
    assert_same_state,
    live_server,
    rest_state,
)


@pytest.fixture
async def srv(database_url: str) -> Any:
    async with live_server(database_url, realtime_poll_s=0.2) as server:
        yield server


async def decision_of(user: User, component_id: str) -> int:
    resp = await user.http.get(f"/v1/components/{component_id}")
    assert resp.status_code == 200, resp.text
    return int(resp.json()["decision_id"])


async def main_answers(user: User, component_id: str, selected: list[str],
                       text: str | None = None) -> None:
    """Main's ``answer_for_max``, the way its runtime calls it."""
    call = await post_call(user.agent, user.main_thread_id, "answer_for_max", {
        "component_id": component_id, "selected": selected, "text": text,
        "reason": "he kept the old field last time"})
    resp = await execute(user.agent, user.main_thread_id, call)
    assert resp.status_code == 200, resp.text


async def test_every_action_reaches_a_live_client_as_rest_shows_it(srv: LiveServer) -> None:
    max_ = await srv.user("max")
    client = await srv.client(max_.token)
    await client.subscribe(None)
    await client.converge(await rest_state(max_.http))  # the snapshot alone
    ctx: dict[str, Any] = {}

    async def new_thread_() -> None:
        ctx["tid"] = await new_thread(max_.http, title="Refactor")

    async def new_message() -> None:
        resp = await max_.http.post(f"/v1/threads/{ctx['tid']}/messages", json={"body": "hi"})
        assert resp.status_code == 201

    async def post_card_() -> None:
        call_id, _ = await post_card(max_.agent, ctx["tid"], CHOICE, TEXT)
        ctx["answer_cid"], ctx["main_cid"] = f"{call_id}:q1", f"{call_id}:q2"

    async def answer() -> None:
        resp = await max_.http.post(f"/v1/components/{ctx['answer_cid']}/answer",
                                    json={"selected": ["keep"], "text": "for one release"})
        assert resp.status_code == 200, resp.text

    async def to_main() -> None:
        resp = await max_.http.post(f"/v1/components/{ctx['main_cid']}/to-main")
        assert resp.status_code == 200, resp.text

    async def main_answer() -> None:
        await main_answers(max_, ctx["main_cid"], [], "Renamed status to state")
        status = (await max_.http.get(f"/v1/components/{ctx['main_cid']}")).json()["status"]
        assert status == "main-answered"

    async def revoke() -> None:
        resp = await max_.http.post(f"/v1/components/{ctx['main_cid']}/revoke")
        assert resp.status_code == 200, resp.text

    async def panel_settle() -> None:
        decision = await decision_of(max_, ctx["main_cid"])
        resp = await max_.http.post(f"/v1/decisions/{decision}/settle",
                                    json={"selected": [], "text": "Mention the rename"})
        assert resp.status_code == 200, resp.text

    actions: list[tuple[str, Callable[[], Awaitable[None]]]] = [
        ("new thread", new_thread_), ("new user message", new_message),
        ("post card", post_card_), ("answer", answer), ("to-main", to_main),
        ("Main answer", main_answer), ("revoke", revoke), ("panel settle", panel_settle)]
    for name, action in actions:
        before = len(client.frames)
        await action()
        expected = await rest_state(max_.http)
        await client.converge(expected)
        assert len(client.frames) > before, f"{name}: no frame at all"
    tables = {f["table"] for f in client.frames if f["type"] == "record.upsert"}
    assert tables == {"threads", "messages", "decisions"}
    await client.close()


async def test_main_answer_text_card(srv: LiveServer) -> None:
    """The Main-answer step above uses a text card; answer_for_max on a choice too."""
    max_ = await srv.user("max")
    tid = await new_thread(max_.http)
    call_id, _ = await post_card(max_.agent, tid, CHOICE)
    cid = f"{call_id}:q1"
    client = await srv.client(max_.token)
    await client.subscribe(None)
    assert (await max_.http.post(f"/v1/components/{cid}/to-main")).status_code == 200
    await main_answers(max_, cid, ["drop"])
    await client.converge(await rest_state(max_.http))
    await client.close()


async def test_a_fresh_snapshot_equals_rest_after_history(srv: LiveServer) -> None:
    """Null cursor = the latest state of everything in scope, however it came about."""
    max_ = await srv.user("max")
    tid = await new_thread(max_.http)
    for i in range(30):
        await max_.http.post(f"/v1/threads/{tid}/messages", json={"body": f"m{i}"})
    call_id, _ = await post_card(max_.agent, tid, CHOICE)
    await max_.http.post(f"/v1/components/{call_id}:q1/answer", json={"selected": ["drop"]})
    client = await srv.client(max_.token)
    await client.subscribe(None)
    expected = await rest_state(max_.http)
    # The catch-up holds everything written below its snapshot's horizon; a write whose
    # transaction is newer than one still open anywhere the horizon cannot rule out (on a
    # shared server: another session's subtransaction, a backend finishing right then) comes
    # live just after `synced`. Either way each record arrives once, in its latest state.
    await client.converge(expected)
    records = [f for f in client.frames if f["type"] == "record.upsert"]
    assert len(records) == len(expected)  # one frame per record: the latest state only
    await client.close()


async def test_the_thread_filter_keeps_those_threads_messages_and_decisions(
        srv: LiveServer) -> None:
    max_ = await srv.user("max")
    mine = await new_thread(max_.http, title="mine")
    other = await new_thread(max_.http, title="other")
    await post_card(max_.agent, mine, CHOICE)
    await post_card(max_.agent, other, CHOICE)
    client = await srv.client(max_.token)
    await client.subscribe(None, threads=[mine, "not-a-uuid"])

    def in_scope(state: State) -> State:
        return {k: v for k, v in state.items()
                if (k[0] == "threads" and k[1] == mine) or
                (k[0] != "threads" and v.get("thread_id") == mine)}

    await client.converge(in_scope(await rest_state(max_.http)))
    await max_.http.post(f"/v1/threads/{other}/messages", json={"body": "elsewhere"})
    await max_.http.post(f"/v1/threads/{mine}/messages", json={"body": "here"})
    expected = in_scope(await rest_state(max_.http))
    assert any(v.get("body") == "here" for v in expected.values())
    await client.converge(expected)
    await client.drain()
    assert all(f["record"].get("body") != "elsewhere" for f in client.frames
               if f["type"] == "record.upsert")
    await client.close()


async def test_a_client_never_receives_another_users_records(srv: LiveServer) -> None:
    max_ = await srv.user("max")
    eve = await srv.user("eve")
    max_client = await srv.client(max_.token)
    eve_client = await srv.client(eve.token)
    await max_client.subscribe(None)
    # eve names max's thread in her filter: it still shows her nothing of his
    max_thread = await new_thread(max_.http, title="max only")
    await eve_client.subscribe(None, threads=[max_thread, eve.main_thread_id])
    await post_card(max_.agent, max_thread, CHOICE)
    await max_.http.post(f"/v1/threads/{max_thread}/messages", json={"body": "private"})
    eve_thread = await new_thread(eve.http, title="eve only")
    await eve.http.post(f"/v1/threads/{eve_thread}/messages", json={"body": "hers"})
    await max_client.converge(await rest_state(max_.http))
    eve_all = await srv.client(eve.token)
    await eve_all.subscribe(None)
    await eve_all.converge(await rest_state(eve.http))
    await eve_client.drain()
    for client, owner in ((max_client, max_), (eve_client, eve), (eve_all, eve)):
        threads = {tid for (table, tid) in (await rest_state(owner.http)) if table == "threads"}
        for frame in client.frames:
            if frame["type"] == "record.upsert":
                record = frame["record"]
                thread = record["id"] if frame["table"] == "threads" else record["thread_id"]
                assert thread in threads, f"{owner.name} received {frame}"
    for client in (max_client, eve_client, eve_all):
        await client.close()


async def test_a_secret_body_never_reaches_a_frame(srv: LiveServer) -> None:
    secret = "hunter2-plaintext-7f3a"
    card_secret = "deploy-token-9b1c"
    max_ = await srv.user("max")
    tid = await new_thread(max_.http)
    client = await srv.client(max_.token)
    await client.subscribe(None)
    # a sensitive user row written straight into the table
    async with srv.services.db.transaction() as conn:
        row = await timeline_store.insert_message(conn, user_id=max_.user_id, thread_id=tid,
                                                  role="user", body=secret, sensitive=True)
    await client.until(lambda: ("messages", row.id) in client.state)
    assert client.state[("messages", row.id)]["body"] is None
    # and one through the real path: a secret card answered on the card
    call_id, _ = await post_card(max_.agent, tid, SECRET)
    resp = await max_.http.post(f"/v1/components/{call_id}:q3/answer",
                                json={"selected": [], "text": card_secret})
    assert resp.status_code == 200, resp.text
    await client.converge(await rest_state(max_.http))
    answer_rows = [r for r in client.state.values()
                   if (r.get("source_meta") or {}).get("componentAnswer")]
    assert answer_rows
    assert all(r["body"] is None for r in answer_rows)
    # a snapshot from scratch, too
    fresh = await srv.client(max_.token)
    await fresh.subscribe(None)
    for frames in (client.frames, fresh.frames):
        text = json.dumps(frames)
        assert secret not in text
        assert card_secret not in text
    await client.close()
    await fresh.close()


async def test_resuming_from_any_frame_cursor_misses_nothing(srv: LiveServer) -> None:
    """Disconnect after any catch-up frame and resume from its cursor: the state completes."""
    max_ = await srv.user("max")
    tid = await new_thread(max_.http)
    for i in range(12):
        await max_.http.post(f"/v1/threads/{tid}/messages", json={"body": f"m{i}"})
    full = await srv.client(max_.token)
    frames = await full.subscribe(None)
    await full.close()
    expected = await rest_state(max_.http)
    for cut in range(len(frames)):
        client = await srv.client(max_.token)
        for frame in frames[: cut + 1]:
            client.apply(frame)
        await client.subscribe(frames[cut]["cursor"])
        assert_same_state(client.state, expected)
        await client.close()


async def test_synced_and_live_cursors_resume_without_gaps(srv: LiveServer) -> None:
    max_ = await srv.user("max")
    client = await srv.client(max_.token)
    await client.subscribe(None)
    tid = await new_thread(max_.http)
    await client.until(lambda: ("threads", tid) in client.state)
    state, cursor = dict(client.state), client.cursor
    await client.close()
    for i in range(5):
        await max_.http.post(f"/v1/threads/{tid}/messages", json={"body": f"while away {i}"})
    back = await srv.client(max_.token)
    back.state = state
    catch_up = await back.subscribe(cursor)
    assert catch_up, "the messages written while away come in the catch-up"
    await back.converge(await rest_state(max_.http))
    await back.close()
