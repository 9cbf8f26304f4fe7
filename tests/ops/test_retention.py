"""Retention on real PostgreSQL: what each rule deletes, and every row it must never touch
(an unsettled card's audit trail, an open decision's pushes, a pending delivery, a thread's
newest turn, a live presence row)."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from maxclaw.clock import SystemClock
from maxclaw.ops.retention import PRUNE_LOCK, RULES, Pruner
from tests.conftest import Harness, app_settings
from tests.integration.test_cli import cli

_n = itertools.count(1)


async def component(conn: Any, user_id: str, thread_id: str, status: str) -> str:
    """A card's component row (with the assistant and tool rows it hangs off)."""
    n = next(_n)
    msg = await conn.fetchval(
        "INSERT INTO messages (user_id, thread_id, role, body) VALUES ($1, $2, 'assistant', 'q')"
        " RETURNING id", user_id, thread_id)
    tool = await conn.fetchval(
        "INSERT INTO messages (user_id, thread_id, role, body, tool_call_id)"
        " VALUES ($1, $2, 'tool', 'r', $3) RETURNING id", user_id, thread_id, f"call_{n}")
    cid = f"call_{n}:q1"
    await conn.execute(
        "INSERT INTO message_components (id, user_id, thread_id, message_id, tool_message_id,"
        " kind, status) VALUES ($1, $2, $3, $4, $5, 'choice', $6)",
        cid, user_id, thread_id, msg, tool, status)
    return cid


async def audit(conn: Any, user_id: str, component_id: str, days_ago: float) -> int:
    return int(await conn.fetchval(
        "INSERT INTO component_audit (user_id, component_id, to_status, actor, at)"
        " VALUES ($1, $2, 'answered', 'max', now() - make_interval(secs => $3)) RETURNING id",
        user_id, component_id, days_ago * 86400))


async def decision(conn: Any, user_id: str, status: str) -> int:
    return int(await conn.fetchval(
        "INSERT INTO decisions (user_id, kind, status, dedupe_key) VALUES ($1, 'agent-question',"
        " $2, $3) RETURNING id", user_id, status, f"d{next(_n)}"))


async def device(conn: Any, user_id: str) -> int:
    url = f"http://127.0.0.1:9/{next(_n)}"
    return int(await conn.fetchval(
        "INSERT INTO push_devices (user_id, platform, config) VALUES ($1, 'webhook', $2)"
        " RETURNING id", user_id, {"url": url, "address": url}))


async def outbox(conn: Any, user_id: str, device_id: int, decision_id: int | None, status: str,
                 days_ago: float) -> int:
    return int(await conn.fetchval(
        "INSERT INTO push_outbox (user_id, device_id, decision_id, kind, payload, status,"
        " created_at, sent_at) VALUES ($1, $2, $3, 'notify', '{}', $4,"
        " now() - make_interval(secs => $5),"
        " CASE WHEN $4 = 'sent' THEN now() - make_interval(secs => $5) END) RETURNING id",
        user_id, device_id, decision_id, status, days_ago * 86400))


async def thread(conn: Any, user_id: str) -> str:
    return str(await conn.fetchval(
        "INSERT INTO threads (user_id, kind) VALUES ($1, 'normal') RETURNING id::text", user_id))


async def turn(conn: Any, user_id: str, thread_id: str, status: str, days_ago: float) -> int:
    return int(await conn.fetchval(
        "INSERT INTO turns (user_id, thread_id, status, created_at, finished_at)"
        " VALUES ($1, $2, $3, now() - make_interval(secs => $4),"
        " CASE WHEN $3 IN ('done', 'lapsed') THEN now() - make_interval(secs => $4) END)"
        " RETURNING id", user_id, thread_id, status, days_ago * 86400))


async def presence(conn: Any, user_id: str, hours: float) -> str:
    cid = f"conn-{next(_n)}"
    await conn.execute(
        "INSERT INTO presence (connection_id, user_id, expires_at)"
        " VALUES ($1, $2, now() + make_interval(secs => $3))", cid, user_id, hours * 3600)
    return cid


async def remaining(h: Harness, table: str, key: str = "id") -> set[Any]:
    async with h.services.db.connection() as conn:
        return {r[0] for r in await conn.fetch(f"SELECT {key} FROM {table}")}


def pruner(h: Harness, **settings: Any) -> Pruner:
    return Pruner(h.services.db, app_settings(h.services.settings.database_url, **settings),
                  SystemClock(), h.services.metrics)


async def test_outbox_keeps_what_an_open_decision_or_a_pending_delivery_needs(
        harness: Harness) -> None:
    actor = await harness.actor("max")
    uid = actor.user_id
    async with harness.services.db.transaction() as conn:
        dev = await device(conn, uid)
        settled, still_open = await decision(conn, uid, "settled"), await decision(conn, uid,
                                                                                 "open")
        busy, in_flight = await decision(conn, uid, "settled"), await decision(conn, uid, "settled")
        gone = {
            await outbox(conn, uid, dev, settled, "sent", 8),
            await outbox(conn, uid, dev, None, "sent", 8),
            await outbox(conn, uid, dev, settled, "dead", 31),
        }
        kept = {
            await outbox(conn, uid, dev, settled, "sent", 6),  # younger than 7 days
            await outbox(conn, uid, dev, settled, "dead", 29),  # younger than 30 days
            await outbox(conn, uid, dev, still_open, "sent", 90),  # its decision is open
            await outbox(conn, uid, dev, still_open, "dead", 90),
            await outbox(conn, uid, dev, busy, "sent", 90),  # its pair has a pending row
            await outbox(conn, uid, dev, busy, "pending", 90),  # pending: never
            await outbox(conn, uid, dev, in_flight, "sending", 90),  # in flight: never
        }
    counted = await pruner(harness).prune(dry_run=True)
    assert counted is not None
    assert counted["push_outbox.sent"] == 2 and counted["push_outbox.dead"] == 1
    assert await remaining(harness, "push_outbox") == gone | kept  # a dry run deletes nothing

    deleted = await pruner(harness).prune()
    assert deleted is not None
    assert deleted["push_outbox.sent"] == 2 and deleted["push_outbox.dead"] == 1
    assert await remaining(harness, "push_outbox") == kept


async def test_audit_of_an_unsettled_card_is_kept_however_old(harness: Harness) -> None:
    actor = await harness.actor("max")
    uid, tid = actor.user_id, actor.main_thread_id
    async with harness.services.db.transaction() as conn:
        comps = {s: await component(conn, uid, tid, s) for s in
                 ("open", "with-main", "handed-back", "answered", "main-answered")}
        old = {s: await audit(conn, uid, c, 400) for s, c in comps.items()}
        recent = await audit(conn, uid, comps["answered"], 10)
    deleted = await pruner(harness).prune()
    assert deleted is not None
    assert deleted["component_audit"] == 2
    assert await remaining(harness, "component_audit") == {
        old["open"], old["with-main"], old["handed-back"], recent}


async def test_audit_follows_the_tables_settled_set(harness: Harness) -> None:
    """docs/domain.md: a withdrawn or expired card is settled (nothing moves it again), so its
    trail goes with retention; a revoked card can still be answered, so its trail stays."""
    actor = await harness.actor("max")
    uid, tid = actor.user_id, actor.main_thread_id
    async with harness.services.db.transaction() as conn:
        comps = {s: await component(conn, uid, tid, s)
                 for s in ("withdrawn", "expired", "revoked")}
        old = {s: await audit(conn, uid, c, 400) for s, c in comps.items()}
    counted = await pruner(harness).prune(dry_run=True)
    assert counted is not None and counted["component_audit"] == 2
    deleted = await pruner(harness).prune()
    assert deleted is not None and deleted["component_audit"] == 2
    assert await remaining(harness, "component_audit") == {old["revoked"]}


async def test_turns_keep_the_active_and_each_threads_newest(harness: Harness) -> None:
    actor = await harness.actor("max")
    uid = actor.user_id
    async with harness.services.db.transaction() as conn:
        a, b, c = [await thread(conn, uid) for _ in range(3)]
        a_old = await turn(conn, uid, a, "done", 40)
        a_lapsed = await turn(conn, uid, a, "lapsed", 35)
        a_newest = await turn(conn, uid, a, "done", 35)  # the thread's newest: kept
        b_old = await turn(conn, uid, b, "lapsed", 40)
        b_queued = await turn(conn, uid, b, "queued", 40)  # active: never
        c_only = await turn(conn, uid, c, "done", 400)  # the thread's only turn: kept
        a_young = await turn(conn, uid, a, "running", 1)
    assert a_young  # (a running turn is newer than a_newest: a_newest may now go)
    deleted = await pruner(harness).prune()
    assert deleted is not None
    assert deleted["turns"] == 4
    assert await remaining(harness, "turns") == {b_queued, c_only, a_young}
    assert {a_old, a_lapsed, a_newest, b_old}.isdisjoint(await remaining(harness, "turns"))


async def test_presence_and_tickets_go_a_day_after_they_expired(harness: Harness) -> None:
    actor = await harness.actor("max")
    async with harness.services.db.transaction() as conn:
        stale = await presence(conn, actor.user_id, -30)
        lapsed_now = await presence(conn, actor.user_id, -1)
        live = await presence(conn, actor.user_id, 0.02)
    assert stale
    token_id = await conn_token(harness, actor.user_id)
    async with harness.services.db.transaction() as conn:
        for name, hours in (("old", -30), ("just-expired", -1), ("fresh", 0.01)):
            await conn.execute(
                "INSERT INTO ws_tickets (ticket_hash, token_id, user_id, expires_at)"
                " VALUES ($1, $2, $3, now() + make_interval(secs => $4))",
                name, token_id, actor.user_id, hours * 3600)
    deleted = await pruner(harness).prune()
    assert deleted is not None and deleted["presence"] == 1 and deleted["ws_tickets"] == 1
    assert await remaining(harness, "presence", "connection_id") == {lapsed_now, live}
    assert await remaining(harness, "ws_tickets", "ticket_hash") == {"just-expired", "fresh"}


async def test_lapsed_runtime_leases_go_after_a_week(harness: Harness) -> None:
    actor = await harness.actor("max")
    async with harness.services.db.transaction() as conn:
        ids = {}
        for name, status, days in (("old", "lapsed", 8), ("recent", "lapsed", 6),
                                   ("active", "active", None)):
            ids[name] = await conn.fetchval(
                "INSERT INTO runtime_leases (user_id, runtime, status, lease_until, lapsed_at)"
                " VALUES ($1, $2, $3, now() - interval '9 days',"
                " CASE WHEN $4::int IS NULL THEN NULL"
                " ELSE now() - make_interval(days => $4::int) END) RETURNING id::text",
                actor.user_id, name, status, days)
    deleted = await pruner(harness).prune()
    assert deleted is not None and deleted["runtime_leases"] == 1
    left = {str(i) for i in await remaining(harness, "runtime_leases")}
    assert left == {ids["recent"], ids["active"]}


async def conn_token(h: Harness, user_id: str) -> int:
    async with h.services.db.connection() as conn:
        return int(await conn.fetchval(
            "SELECT id FROM api_tokens WHERE user_id = $1 LIMIT 1", user_id))


async def test_batches_until_done_and_zero_days_keeps_forever(harness: Harness) -> None:
    actor = await harness.actor("max")
    uid, tid = actor.user_id, actor.main_thread_id
    async with harness.services.db.transaction() as conn:
        done = await component(conn, uid, tid, "answered")
        for _ in range(7):
            await audit(conn, uid, done, 400)
        dev = await device(conn, uid)
        for _ in range(3):
            await outbox(conn, uid, dev, None, "sent", 400)
    deleted = await pruner(harness, prune_batch=2, retention_outbox_sent_days=0).prune()
    assert deleted is not None
    assert deleted["component_audit"] == 7 and deleted["push_outbox.sent"] == 0
    assert await remaining(harness, "component_audit") == set()
    assert len(await remaining(harness, "push_outbox")) == 3
    body = (await harness.client.get("/metrics")).text
    assert 'maxclaw_pruned_rows_total{rule="component_audit"} 7.0' in body


async def test_one_pruner_at_a_time(harness: Harness) -> None:
    actor = await harness.actor("max")
    async with harness.services.db.transaction() as conn:
        await presence(conn, actor.user_id, -48)
    held = asyncio.Event()
    release = asyncio.Event()

    async def hold() -> None:
        async with harness.services.db.transaction() as conn:
            await conn.execute("SELECT pg_advisory_xact_lock($1)", PRUNE_LOCK)
            held.set()
            await release.wait()

    holder = asyncio.create_task(hold())
    await held.wait()
    try:
        assert await pruner(harness).prune() is None  # another replica is pruning
        assert len(await remaining(harness, "presence", "connection_id")) == 1
    finally:
        release.set()
        await holder
    deleted = await pruner(harness).prune()
    assert deleted is not None and deleted["presence"] == 1


# presence holds a row per live connection (and a day of lapsed ones): a scan is its plan
INDEXED_RULES = [r for r in RULES if r.table != "presence"]


@pytest.mark.parametrize("rule", INDEXED_RULES, ids=[r.name for r in INDEXED_RULES])
async def test_every_rule_is_served_by_an_index(harness: Harness, rule: Any) -> None:
    """No rule's delete reads a whole table: with sequential scans priced out, each plan uses
    the indexes of migration 0005_ops (without them the planner has no other choice)."""
    async with harness.services.db.transaction() as conn:
        await conn.execute("SET LOCAL enable_seqscan = off")
        lines = [r[0] for r in await conn.fetch("EXPLAIN " + rule.delete_sql(),
                                                SystemClock().now(), 100)]
    assert not any("Seq Scan" in line for line in lines), "\n".join(lines)


async def test_the_cli_counts_then_deletes(harness: Harness, tmp_path: Path) -> None:
    actor = await harness.actor("max")
    async with harness.services.db.transaction() as conn:
        await presence(conn, actor.user_id, -48)
    url = harness.services.settings.database_url
    counted = await cli("prune", "--dry-run", "--database-url", url, data_dir=tmp_path)
    counted.assert_ok()
    out = json.loads(counted.out)
    assert out["dry_run"] is True and out["rows"]["presence"] == 1
    assert set(out["rows"]) == {r.name for r in RULES}
    assert len(await remaining(harness, "presence", "connection_id")) == 1
    deleted = await cli("prune", "--database-url", url, data_dir=tmp_path)
    deleted.assert_ok()
    assert json.loads(deleted.out) == {"dry_run": False, "rows": {**out["rows"]}}
    assert await remaining(harness, "presence", "connection_id") == set()


async def test_serve_prunes_in_the_background(database_url: str) -> None:
    """With MAXCLAW_RUN_PRUNER on (serve's default) a round runs at start, then every
    MAXCLAW_PRUNE_INTERVAL_S."""
    from maxclaw.app import create_app

    app = create_app(app_settings(database_url, run_pruner=True, prune_interval_s=0.2))
    async with app.router.lifespan_context(app):
        services = app.state.services
        user_id, _ = await services.auth.create_user("max")
        async with services.db.transaction() as conn:
            await presence(conn, user_id, -48)
        for _ in range(100):  # another task deletes it: poll, bounded (20 s)
            async with services.db.connection() as conn:
                if not await conn.fetchval("SELECT count(*) FROM presence"):
                    break
            await asyncio.sleep(0.2)
        else:
            raise AssertionError("the background pruner did not delete the expired row")
