"""``GET /v1/ws``: auth and close codes, hello, bad frames, resync, ping and focus presence."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from typing import Any

import asyncpg
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from maxclaw.realtime import store
from maxclaw.realtime.cursor import Position, decode, encode
from tests.cards import CHOICE, new_thread, post_card
from tests.realtime_support import LiveServer, live_server, rest_state


@pytest.fixture
async def srv(database_url: str) -> Any:
    async with live_server(database_url, presence_ttl_s=0.6) as server:
        yield server


async def closed_with(url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    """Connect, expect the server to accept and then close; returns (code, reason)."""
    async with connect(url, additional_headers=headers or {}) as ws:
        with pytest.raises(ConnectionClosed) as info:
            await asyncio.wait_for(ws.recv(), 10)
    assert info.value.rcvd is not None
    return info.value.rcvd.code, info.value.rcvd.reason


async def test_bad_missing_and_agent_tokens_are_closed_after_accept(srv: LiveServer) -> None:
    max_ = await srv.user("max")
    assert (await closed_with(srv.ws_url))[0] == 4401
    assert (await closed_with(srv.ws_url + "?token=nope"))[0] == 4401
    assert (await closed_with(srv.ws_url, {"Authorization": "Bearer nope"}))[0] == 4401
    assert (await closed_with(srv.ws_url, {"Authorization": "Basic eDp5"}))[0] == 4401
    code, reason = await closed_with(srv.ws_url + f"?token={max_.agent_token}")
    assert code == 4403
    assert "user token" in reason
    assert (await closed_with(srv.ws_url,
                              {"Authorization": f"Bearer {max_.agent_token}"}))[0] == 4403


async def test_token_in_header_or_query_gets_hello(srv: LiveServer) -> None:
    max_ = await srv.user("max")
    for in_query in (False, True):
        client = await srv.client(max_.token, in_query=in_query)
        assert client.hello is not None
        server_time = datetime.fromisoformat(client.hello["server_time"])
        offset = server_time.utcoffset()
        assert offset is not None
        assert offset.total_seconds() == 0
        assert await client.reply({"op": "ping"}) == {"type": "pong"}
        await client.close()


@pytest.mark.parametrize(("frame", "code"), [
    ("not json", "bad_request"),
    ("[1, 2]", "bad_request"),
    ('{"no": "op"}', "bad_request"),
    ('{"op": 7}', "bad_request"),
    ('{"op": "dance"}', "bad_request"),
    ('{"op": "subscribe", "cursor": 5}', "invalid"),
    ('{"op": "subscribe", "cursor": null, "threads": "t1"}', "invalid"),
    ('{"op": "subscribe", "cursor": null, "threads": [1]}', "invalid"),
    ('{"op": "focus"}', "invalid"),
    ('{"op": "focus", "thread_id": 12}', "invalid"),
    ('{"op": "focus", "thread_id": "not-a-uuid"}', "not_found"),
    ('{"op": "focus", "thread_id": "00000000-0000-0000-0000-000000000000"}', "not_found"),
    ('"' + "x" * 70_000 + '"', "too_large"),
])
async def test_bad_frames_get_an_error_and_the_connection_stays(srv: LiveServer, frame: str,
                                                               code: str) -> None:
    max_ = await srv.user("max")
    client = await srv.client(max_.token)
    error = await client.reply(frame)
    assert error["type"] == "error", error
    assert error["code"] == code, error
    assert isinstance(error["message"], str)
    assert error["message"]
    assert await client.reply({"op": "ping"}) == {"type": "pong"}  # still open and serving
    await client.close()


async def test_binary_frames_are_refused_politely(srv: LiveServer) -> None:
    max_ = await srv.user("max")
    client = await srv.client(max_.token)
    await client.ws.send(b'{"op": "ping"}')
    error = await client.recv()
    assert error["type"] == "error"
    assert error["code"] == "bad_request"
    assert await client.reply({"op": "ping"}) == {"type": "pong"}
    await client.close()


async def test_undecodable_or_unknown_cursors_ask_for_a_resync(srv: LiveServer) -> None:
    max_ = await srv.user("max")
    client = await srv.client(max_.token)
    assert await client.reply({"op": "subscribe", "cursor": "garbage"}) == {"type": "resync"}
    future = encode(Position(2**62, 1))  # a position this database has not reached
    assert await client.reply({"op": "subscribe", "cursor": future}) == {"type": "resync"}
    beyond_rev = encode(Position(1, 2**62))
    assert await client.reply({"op": "subscribe", "cursor": beyond_rev}) == {"type": "resync"}
    # the connection still works, and a null cursor is the way back (what the catch-up's
    # horizon holds back on a busy shared server arrives live right after `synced`)
    await client.subscribe(None)
    await client.converge(await rest_state(max_.http))
    assert set(client.state) == {("threads", max_.main_thread_id)}
    await client.close()


async def test_synced_cursor_resumes_with_nothing_new(srv: LiveServer) -> None:
    max_ = await srv.user("max")
    first = await srv.client(max_.token)
    await first.subscribe(None)
    await first.converge(await rest_state(max_.http))  # the catch-up, and any live remainder
    assert len([f for f in first.frames if f["type"] == "record.upsert"]) == 1
    cursor = first.cursor
    assert cursor is not None
    assert decode(cursor) > Position(0, 0)
    await first.close()
    again = await srv.client(max_.token)
    assert await again.subscribe(cursor) == []
    tid = await new_thread(max_.http, title="after")
    await again.until(lambda: ("threads", tid) in again.state)
    await again.close()


async def presence_rows(srv: LiveServer) -> list[asyncpg.Record]:
    async with srv.services.db.connection() as conn:
        return list(await conn.fetch(
            "SELECT connection_id, thread_id::text, expires_at FROM presence"))


async def wait_for_rows(srv: LiveServer, done: Any, wait_s: float = 10) -> list[asyncpg.Record]:
    """Poll the presence table until ``done(rows)`` (the server acts after the socket closes)."""
    deadline = time.monotonic() + wait_s
    while True:
        rows = await presence_rows(srv)
        if done(rows):
            return rows
        assert time.monotonic() < deadline, f"presence never reached the expected state: {rows}"
        await asyncio.sleep(0.05)


async def test_focus_sets_presence_refreshes_it_and_leaves_on_close(srv: LiveServer) -> None:
    max_ = await srv.user("max")
    eve = await srv.user("eve")
    tid = await new_thread(max_.http)
    client = await srv.client(max_.token)
    ok = await client.reply({"op": "focus", "thread_id": tid.upper()})
    assert ok == {"type": "focus.ok", "thread_id": tid}
    [row] = await presence_rows(srv)
    assert row["thread_id"] == tid
    first_expiry = row["expires_at"]
    # the TTL is 0.6 s here: a live connection keeps pushing its expiry forward
    await wait_for_rows(srv, lambda rows: rows and rows[0]["expires_at"] > first_expiry)
    assert await srv.services.presence.is_watching(max_.user_id, tid)
    # another user's thread looks absent
    eve_thread = await new_thread(eve.http)
    error = await client.reply({"op": "focus", "thread_id": eve_thread})
    assert error["type"] == "error"
    assert error["code"] == "not_found"
    assert await client.reply({"op": "focus", "thread_id": None}) == {
        "type": "focus.ok", "thread_id": None}
    assert [r["thread_id"] for r in await presence_rows(srv)] == [None]
    await client.reply({"op": "focus", "thread_id": tid})
    await client.close()
    await wait_for_rows(srv, lambda rows: rows == [])
    assert not await srv.services.presence.is_watching(max_.user_id, tid)


async def test_focus_feeds_the_due_time_rule(srv: LiveServer) -> None:
    """A card posted while Max has its thread in focus gets no carrier; unfocused, it does."""
    max_ = await srv.user("max")
    watched = await new_thread(max_.http, title="watched")
    other = await new_thread(max_.http, title="other")
    client = await srv.client(max_.token)
    await client.reply({"op": "focus", "thread_id": watched})
    await post_card(max_.agent, watched, CHOICE)
    await post_card(max_.agent, other, CHOICE)
    decisions = (await max_.http.get("/v1/decisions")).json()["decisions"]
    assert [d["thread_id"] for d in decisions] == [other]
    await client.close()


async def test_ping_is_answered_between_catch_up_frames(srv: LiveServer) -> None:
    """Ops are served while a subscription catches up (the catch-up runs beside the reader)."""
    max_ = await srv.user("max")
    client = await srv.client(max_.token)
    await client.send({"op": "subscribe", "cursor": None})
    await client.send({"op": "ping"})
    seen: list[str] = []
    while "synced" not in seen or "pong" not in seen:
        seen.append((await client.recv())["type"])
    assert seen.count("pong") == 1
    assert seen.count("synced") == 1
    await client.close()


async def test_a_second_subscribe_replaces_the_first(srv: LiveServer) -> None:
    max_ = await srv.user("max")
    a = await new_thread(max_.http, title="a")
    b = await new_thread(max_.http, title="b")
    client = await srv.client(max_.token)
    await client.subscribe(None, threads=[a])
    await client.until(lambda: ("threads", a) in client.state)
    await client.subscribe(None, threads=[b])
    await client.until(lambda: ("threads", b) in client.state)
    await client.drain()
    assert {f["record"]["id"] for f in client.frames if f["type"] == "record.upsert"} == {a, b}
    await max_.http.post(f"/v1/threads/{a}/messages", json={"body": "to a"})
    await max_.http.post(f"/v1/threads/{b}/messages", json={"body": "to b"})
    await client.until(lambda: any(k[0] == "messages" for k in client.state))
    await client.drain()
    bodies = [f["record"]["body"] for f in client.frames if f.get("table") == "messages"]
    assert bodies == ["to b"]
    await client.close()


async def test_an_unexpected_error_in_an_op_is_an_error_frame(
        srv: LiveServer, monkeypatch: pytest.MonkeyPatch) -> None:
    max_ = await srv.user("max")
    client = await srv.client(max_.token)

    async def broken(*_: Any) -> None:
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(srv.services.presence, "focus", broken)
    error = await client.reply({"op": "focus", "thread_id": None})
    assert error["type"] == "error"
    assert error["code"] == "internal"
    assert await client.reply({"op": "ping"}) == {"type": "pong"}  # still serving
    await client.close()


@pytest.mark.parametrize(("fault", "code", "close"), [
    (TimeoutError("the pool timed out"), "unavailable", 1013),  # the database is not there
    (asyncpg.QueryCanceledError("canceling statement due to statement timeout"), "internal",
     1011),
])
async def test_a_failed_catch_up_says_so_and_closes(
        srv: LiveServer, monkeypatch: pytest.MonkeyPatch, fault: Exception, code: str,
        close: int) -> None:
    max_ = await srv.user("max")
    real = store.read_changes
    srv.services.realtime.catch_up_page_size = 17  # marks the catch-up's reads

    async def failing(conn: Any, users: Any, after: Any, **kwargs: Any) -> Any:
        if kwargs.get("limit") == 17:
            raise fault
        return await real(conn, users, after, **kwargs)

    monkeypatch.setattr(store, "read_changes", failing)
    client = await srv.client(max_.token)
    error = await client.reply({"op": "subscribe", "cursor": None})
    assert error["type"] == "error"
    assert error["code"] == code
    with pytest.raises(ConnectionClosed) as closed:
        await client.recv()
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == close


async def test_a_client_leaving_mid_catch_up_does_not_cancel_the_running_read(
        srv: LiveServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The socket drops while its catch-up page is being read: the read runs to its end (its
    rows dropped) instead of being cancelled, because a cancel is a new connection to
    PostgreSQL and, through Debian's PgBouncer 1.18, a cancel racing a disconnect can make
    PgBouncer exit (a CI run of the PgBouncer step lost its pooler that way); the pooled
    connection comes back to the pool."""
    max_ = await srv.user("max")
    real = store.read_changes
    srv.services.realtime.catch_up_page_size = 17  # marks the catch-up's reads
    reading, finished = asyncio.Event(), asyncio.Event()
    ended: list[str] = []

    async def slow(conn: Any, users: Any, after: Any, **kwargs: Any) -> Any:
        if kwargs.get("limit") != 17:
            return await real(conn, users, after, **kwargs)
        reading.set()
        try:
            await conn.execute("SELECT pg_sleep(0.5)")  # cancelled: QueryCanceledError here
            ended.append("finished")
        except BaseException as exc:
            ended.append(type(exc).__name__)
            raise
        finally:
            finished.set()
        return await real(conn, users, after, **kwargs)

    monkeypatch.setattr(store, "read_changes", slow)
    pool = srv.services.db.pool
    client = await srv.client(max_.token)
    await client.send({"op": "subscribe", "cursor": None})
    await asyncio.wait_for(reading.wait(), 10)
    client.ws.transport.abort()  # the network drops mid-read
    await asyncio.wait_for(finished.wait(), 10)
    assert ended == ["finished"]
    deadline = time.monotonic() + 5
    while pool.get_idle_size() < pool.get_size():  # the read gives its connection back
        assert time.monotonic() < deadline, (pool.get_idle_size(), pool.get_size())
        await asyncio.sleep(0.02)
