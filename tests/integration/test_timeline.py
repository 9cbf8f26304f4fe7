"""The timeline over HTTP: threads, messages, tokens and roles, and the error body."""

from __future__ import annotations

import uuid

from tests.conftest import Harness


def assert_error(resp, status: int, code: str) -> None:  # type: ignore[no-untyped-def]
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert body["code"] == code
    assert isinstance(body["message"], str) and body["message"]
    assert isinstance(body["data"], dict)


async def test_me_and_threads(harness: Harness) -> None:
    max_ = await harness.actor("max")
    me = (await max_.user.get("/v1/me")).json()
    # the contract's three fields, and what issue 30 added (counts and settings)
    assert {k: me[k] for k in ("user_id", "name", "main_thread_id")} == {
        "user_id": max_.user_id, "name": "max", "main_thread_id": max_.main_thread_id}
    assert me["threads"] == 1 and me["archived_threads"] == 0 and "settings" in me
    created = await max_.user.post("/v1/threads", json={"title": "Refactor", "kind": "normal"})
    assert created.status_code == 201
    thread = created.json()
    assert thread["kind"] == "normal" and thread["turn_state"] == "idle" and thread["rev"] > 0
    listed = (await max_.user.get("/v1/threads")).json()["threads"]
    assert {t["id"] for t in listed} == {max_.main_thread_id, thread["id"]}
    got = (await max_.user.get(f"/v1/threads/{thread['id']}")).json()
    assert got == thread


async def test_main_thread_cannot_be_created(harness: Harness) -> None:
    max_ = await harness.actor("max")
    assert_error(await max_.user.post("/v1/threads", json={"kind": "main"}), 422, "invalid")


async def test_user_message_queues_a_turn(harness: Harness) -> None:
    max_ = await harness.actor("max")
    thread = (await max_.user.post("/v1/threads", json={"title": "t"})).json()
    resp = await max_.user.post(f"/v1/threads/{thread['id']}/messages", json={"body": "hello"})
    assert resp.status_code == 201
    msg = resp.json()
    assert msg["role"] == "user" and msg["body"] == "hello" and msg["thread_id"] == thread["id"]
    again = await max_.user.post(f"/v1/threads/{thread['id']}/messages", json={"body": "more"})
    assert again.status_code == 201
    got = (await max_.user.get(f"/v1/threads/{thread['id']}")).json()
    assert got["turn_state"] == "queued"
    async with harness.services.db.connection() as conn:
        turns = await conn.fetch("SELECT status FROM turns WHERE thread_id = $1::uuid",
                                 thread["id"])
    assert [t["status"] for t in turns] == ["queued"]  # one turn for both messages
    page = (await max_.user.get(f"/v1/threads/{thread['id']}/messages?after_id={msg['id']}"))
    assert [m["body"] for m in page.json()["messages"]] == ["more"]


async def test_bad_input_cases(harness: Harness) -> None:
    max_ = await harness.actor("max")
    other = await harness.actor("eve")
    thread = (await max_.user.post("/v1/threads", json={"title": "t"})).json()
    path = f"/v1/threads/{thread['id']}/messages"
    assert_error(await max_.user.post(path, content=b"{not json",
                                      headers={"content-type": "application/json"}),
                 400, "bad_request")
    assert_error(await max_.user.post(path, content=b"body=x",
                                      headers={"content-type": "text/plain"}), 400, "bad_request")
    assert_error(await harness.client.get("/v1/threads"), 401, "unauthorized")
    assert_error(await harness.with_token("nope").get("/v1/threads"), 401, "unauthorized")
    assert_error(await other.user.get(f"/v1/threads/{thread['id']}"), 404, "not_found")
    assert_error(await other.user.post(path, json={"body": "x"}), 404, "not_found")
    assert_error(await max_.user.get("/v1/threads/not-a-uuid"), 404, "not_found")
    assert_error(await max_.user.get(f"/v1/threads/{uuid.uuid4()}"), 404, "not_found")
    assert_error(await max_.agent.get("/v1/threads"), 403, "forbidden")
    big = b'{"body": "' + b"x" * (1024 * 1024 + 10) + b'"}'
    assert_error(await max_.user.post(path, content=big,
                                      headers={"content-type": "application/json"}),
                 413, "too_large")
    assert_error(await max_.user.get(f"{path}?limit=501"), 422, "invalid")
    assert_error(await max_.user.post(path, json={"nobody": 1}), 422, "invalid")


async def test_unavailable_database_is_503(harness: Harness) -> None:
    max_ = await harness.actor("max")
    await harness.services.db.close()  # the pool is gone, as when the database went away
    resp = await max_.user.get("/v1/threads")
    assert_error(resp, 503, "unavailable")
    assert (await harness.client.get("/readyz")).status_code == 503
    assert (await harness.client.get("/healthz")).status_code == 200


async def test_metrics_count_requests(harness: Harness) -> None:
    max_ = await harness.actor("max")
    await max_.user.get("/v1/threads")
    text = (await harness.client.get("/metrics")).text
    assert 'maxclaw_http_requests_total{method="GET",route="/v1/threads",status="200"} 1.0' in text
