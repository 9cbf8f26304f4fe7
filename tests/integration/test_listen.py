"""One LISTEN connection per process: every channel rides on it, and one reconnect policy tells
every subscriber when it was lost and when it is back (NOTIFY is only a hint: each re-reads)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import asyncpg

from maxclaw.auth.revocations import CHANNEL as REVOKED
from maxclaw.db.database import connect
from maxclaw.db.listen import LISTENER_APP_NAME, Listener
from maxclaw.push.dispatcher import CHANNEL as PUSH
from maxclaw.realtime.store import CHANNEL as REV
from maxclaw.turns.listener import CHANNEL as TURN
from tests import pooler
from tests.realtime_support import live_server

CHANNELS = {REVOKED, TURN, REV, PUSH}


def direct(database_url: str) -> str:
    """Where a LISTEN goes: past PgBouncer when the tests run behind it, as the app does."""
    url: str = pooler.settings_for(database_url).get("listen_database_url", database_url)
    return url


async def until(done: Callable[[], bool], what: str, wait_s: float = 20.0) -> None:
    deadline = time.monotonic() + wait_s
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def listen_backends(conn: asyncpg.Connection) -> list[asyncpg.Record]:
    """This database's listener connections: backends whose last statement was a LISTEN, or
    named as the listener (its last statement may be ``Listener.channels``'s)."""
    return list(await conn.fetch(
        "SELECT pid, application_name FROM pg_stat_activity"
        " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        "   AND (query ILIKE 'LISTEN %' OR application_name = $1)", LISTENER_APP_NAME))


class Heard:
    """What each subscription of a listener was told, by channel."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def spy_on(self, listener: Listener) -> None:
        """Record every subscriber's callbacks (then run them as before)."""
        listener._subs[:] = [self._wrap(sub) for sub in listener._subs]

    def _wrap(self, sub: Any) -> Any:
        def record(event: str, then: Callable[..., None] | None) -> Callable[..., None]:
            def call(*args: str) -> None:
                self.events.append((sub.channel, event))
                if then is not None:
                    then(*args)
            return call
        return replace(sub, on_notify=record("notify", sub.on_notify),
                       on_reconnect=record("reconnect", sub.on_reconnect),
                       on_lost=record("lost", sub.on_lost))

    def channels(self, event: str) -> set[str]:
        return {channel for channel, e in self.events if e == event}


async def test_one_connection_serves_every_channel_and_reconnects_them_all(
        database_url: str) -> None:
    async with live_server(database_url, run_push_dispatcher=True, realtime_poll_s=30) as srv:
        services = srv.services
        listener = services.listener
        max_ = await srv.user("max")
        # every subscriber at work: an authentication (revocations), a waiting claim (turn
        # wake-ups); the hub and the dispatcher subscribed when they started
        assert (await max_.http.get("/v1/threads")).status_code == 200
        claim = asyncio.create_task(max_.agent.post(
            "/v1/agent/turns/claim", json={"wait_s": 1, "runtime_id": "rt-1"}, timeout=30))
        await until(lambda: len({s.channel for s in listener._subs}) == 4, "four subscribers")
        assert (await claim).status_code == 204
        own = await connect(database_url)
        try:
            await until(lambda: listener.listening, "the connection")
            await asyncio.sleep(0.2)  # a late subscriber's LISTEN would show up by now
            [backend] = await listen_backends(own)
            assert backend["application_name"] == LISTENER_APP_NAME
            assert await listener.channels() == CHANNELS

            # cached while the connection is up; dropped when it goes (a revoke may go unheard)
            assert services.auth._cache
            heard = Heard()
            heard.spy_on(listener)
            connects = listener.connects
            hub_connects = services.realtime.listener_connects
            assert await own.fetchval("SELECT pg_terminate_backend($1)", backend["pid"])
            await until(lambda: heard.channels("lost") == CHANNELS, "every on_lost")
            assert not services.auth._cache
            await until(lambda: heard.channels("reconnect") == CHANNELS, "every on_reconnect")
            assert listener.connects == connects + 1
            assert services.realtime.listener_connects == hub_connects + 1
            [again] = await listen_backends(own)
            assert again["pid"] != backend["pid"]
            assert await listener.channels() == CHANNELS

            # a NOTIFY on each channel after the reconnect reaches its subscriber
            turns_heard = services.turns.listener.notifications
            hints = services.realtime.metrics.hints._value.get()
            for channel in CHANNELS:
                await own.execute("SELECT pg_notify($1, '0')", channel)
            await until(lambda: heard.channels("notify") == CHANNELS, "a NOTIFY on each channel")
            assert services.turns.listener.notifications == turns_heard + 1
            assert services.realtime.metrics.hints._value.get() == hints + 1
        finally:
            await own.close()


async def test_every_subscriber_is_told_of_a_lost_connection_and_hears_after_reconnect(
        database_url: str) -> None:
    listener = Listener(direct(database_url), retry_first_s=0.05, retry_max_s=0.2)
    heard: dict[str, list[str]] = {name: [] for name in ("a", "b", "c")}
    for name, channel in (("a", "test_one"), ("b", "test_one"), ("c", "test_two")):
        log = heard[name]
        listener.subscribe(channel, log.append, on_reconnect=lambda log=log: log.append("up"),
                           on_lost=lambda log=log: log.append("down"))
    own = await connect(database_url)
    try:
        assert await listener.ensure_listening()
        assert all(log == ["up"] for log in heard.values())
        late: list[str] = []  # a subscriber that comes while the connection is open
        listener.subscribe("test_three", late.append, on_reconnect=lambda: late.append("up"))
        await until(lambda: late == ["up"], "the late subscriber's LISTEN")

        [backend] = await listen_backends(own)
        assert await own.fetchval("SELECT pg_terminate_backend($1)", backend["pid"])
        await until(lambda: all(log[-1:] == ["up"] and "down" in log for log in heard.values())
                    and late == ["up", "up"], "every subscriber told lost, then back")
        for channel, payload in (("test_one", "1"), ("test_two", "2"), ("test_three", "3")):
            await own.execute("SELECT pg_notify($1, $2)", channel, payload)
        await until(lambda: heard["a"][-1] == "1" and heard["b"][-1] == "1"
                    and heard["c"][-1] == "2" and late[-1] == "3", "each NOTIFY")
        assert heard["a"] == ["up", "down", "up", "1"]
        assert heard["c"] == ["up", "down", "up", "2"]
        assert listener.connects == 2
    finally:
        await listener.stop()
        await own.close()
    assert not listener.listening


async def test_a_listener_that_cannot_connect_retries_until_it_can(database_url: str,
                                                                  pg_server: str) -> None:
    """The database refuses connections: ``ensure_listening`` answers False at once (the
    caller polls instead) and the background task backs off and connects once it may."""
    listener = Listener(direct(database_url), retry_first_s=0.05, retry_max_s=0.2)
    ups: list[str] = []
    listener.subscribe("test_one", ups.append, on_reconnect=lambda: ups.append("up"))
    server = await asyncpg.connect(pg_server)
    own = await connect(database_url)
    dbname = await own.fetchval("SELECT current_database()")
    try:
        await server.execute(f'ALTER DATABASE "{dbname}" ALLOW_CONNECTIONS false')
        assert not await listener.ensure_listening()
        await asyncio.sleep(0.5)  # several attempts, each refused
        assert ups == [] and listener.connects == 0
        await server.execute(f'ALTER DATABASE "{dbname}" ALLOW_CONNECTIONS true')
        await until(lambda: ups == ["up"], "the connect once allowed")
        await own.execute("SELECT pg_notify('test_one', 'hello')")
        await until(lambda: ups[-1:] == ["hello"], "the NOTIFY")
    finally:
        await server.execute(f'ALTER DATABASE "{dbname}" ALLOW_CONNECTIONS true')
        await server.close()
        await listener.stop()
        await own.close()
