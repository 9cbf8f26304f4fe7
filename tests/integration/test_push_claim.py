"""The push claim on real PostgreSQL: it goes round the users (a round-robin cursor), and it
reads about what it takes through ``push_outbox_user_ready``, not the backlog."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from maxclaw.push import store
from maxclaw.push.outbox import enqueue_notification
from tests import pg, plans
from tests.conftest import Harness
from tests.integration.push_fakes import insert_decision
from tests.integration.test_push_outbox import CHOICE, add_device

BACKLOG_USERS = 50
BACKLOG = 2_000  # bench.push's shape: 50 users x 2 devices, 20 rows per device
CLAIM = 48  # the dispatcher's default concurrency


async def test_claims_go_round_more_users_than_one_claim_holds(harness: Harness) -> None:
    """Six users with two due rows each and claims of four: each claim starts after the last
    user the one before served, so nobody waits more than one round (a claim that always
    started at the smallest user id would keep serving the same four while they had rows)."""
    users = []
    for i in range(6):
        actor = await harness.actor(f"user{i}")
        async with harness.services.db.transaction() as conn:
            await add_device(conn, actor.user_id)
            await add_device(conn, actor.user_id, url="http://127.0.0.1:9/second")
            decision = await insert_decision(conn, actor.user_id, actor.main_thread_id,
                                             f"call_{i}:q1", options=CHOICE)
            await enqueue_notification(conn, user_id=actor.user_id, decision=decision,
                                       thread_title="t")
        users.append(actor.user_id)
    order = sorted(users, key=uuid.UUID)
    now = datetime.now(UTC) + timedelta(seconds=1)
    cursor = store.FIRST_USER
    rounds = []
    async with harness.services.db.connection() as conn:
        for _ in range(3):
            claimed = await store.claim_due(conn, now=now, limit=4, lease_s=60,
                                            after_user=cursor)
            cursor = store.next_cursor(cursor, (r.user_id for r in claimed))
            rounds.append(sorted((r.user_id for r in claimed), key=order.index))
    assert rounds[0] == order[:4]
    assert rounds[1] == order[:2] + order[4:]  # users 5 and 6, then round again to 1 and 2
    assert rounds[2] == order[2:]  # users 3 and 4, then 5 and 6: every second row
    assert cursor == order[5]


def _scans(node: dict[str, Any]) -> list[dict[str, Any]]:
    found = [node]
    for child in node.get("Plans", []):
        found.extend(_scans(child))
    return found


async def test_the_claim_reads_what_it_takes_not_the_backlog(harness: Harness) -> None:
    """2,000 due rows over 50 users and 5,000 sent ones: a claim of 48 reaches push_outbox
    only through indexes and reads a few rows per row it takes, with either plan asyncpg may
    use (the claim it replaced sorted the oldest 2,000 ready rows on every call)."""
    # on a schema partitioned by user, each partition gets the backlog the single table has
    # (at 1/8 of the rows a partition is small enough that scanning it is the planner's
    # right call, and the test would be judging a different shape)
    users = BACKLOG_USERS * max(1, pg.partitions_from_env())
    async with harness.services.db.transaction() as conn:
        await conn.execute(
            "INSERT INTO users (name) SELECT 'backlog-' || g FROM generate_series(1, $1) g",
            users)
        await conn.execute(
            "INSERT INTO push_devices (user_id, platform, config, secret)"
            " SELECT u.id, 'webhook', jsonb_build_object('url', 'http://127.0.0.1:9/' || k,"
            "        'address', u.name || '/' || k), 'secret-0123456789'"
            " FROM users AS u, generate_series(1, 2) AS k WHERE u.name LIKE 'backlog-%'")
        for status, per_device in (("sent", 25), ("pending", BACKLOG // BACKLOG_USERS // 2)):
            await conn.execute(
                "INSERT INTO push_outbox (user_id, device_id, kind, collapse_id, payload, status)"
                " SELECT d.user_id, d.id, 'notify', 'bench', '{}', $1"
                " FROM push_devices AS d, generate_series(1, $2)", status, per_device)
        await conn.execute("ANALYZE push_outbox")
    now = datetime.now(UTC) + timedelta(seconds=1)
    async with harness.services.db.connection() as conn:
        for mode in plans.MODES:
            claiming = conn.transaction()
            await claiming.start()
            try:  # EXPLAIN ANALYZE runs the claim: roll it back for the next mode
                rows = await plans.explain(conn, store.CLAIM_DUE,
                                           (now, CLAIM, 10.0, store.FIRST_USER), mode,
                                           "ANALYZE, FORMAT JSON")
            finally:
                await claiming.rollback()
            plan = plans.root(rows)
            nodes = _scans(plan["Plan"])
            # the table, or its partitions (push_outbox_pN, index <name>_pN) when it is
            # partitioned by user (MAXCLAW_TEST_PARTITIONS)
            outbox = [n for n in nodes
                      if re.fullmatch(r"push_outbox(_p\d+)?", n.get("Relation Name", ""))]
            assert plan["Plan"]["Actual Rows"] == CLAIM, mode
            assert not [n for n in outbox if n["Node Type"] == "Seq Scan"], f"{mode}: {plan}"
            assert any(re.fullmatch(r"push_outbox_user_ready(_p\d+)?", n.get("Index Name", ""))
                       for n in outbox), mode
            read = sum(n["Actual Rows"] * n["Actual Loops"] for n in outbox)
            # partitioned, each probe of the user walk merges the next row of every
            # partition's index: one row per partition more per row taken, still nothing
            # like the backlog
            bound = (5 + pg.partitions_from_env()) * CLAIM
            assert read <= bound, f"{mode}: {read} rows read for {CLAIM} claimed"
