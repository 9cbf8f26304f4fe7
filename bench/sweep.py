"""Item 4: the due sweep among many cards — with nothing due, and with thousands due.

Both go through ``ComponentService`` in-process (``sweep_due`` / ``sweep_due_all``), the code
``maxclaw serve``'s minute tick and ``maxclaw sweep`` run. The claim query's own server time is
read from ``EXPLAIN ANALYZE`` (inside a rolled-back transaction, since it takes row locks).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import asyncpg

from bench import dataset
from bench.stats import summary_ms
from maxclaw.components import sweep_store as components_store


async def claim_plan(conn: asyncpg.Connection, limit: int) -> dict[str, Any]:
    """EXPLAIN ANALYZE of the sweeper's claim: server time, and which index it used."""
    tx = conn.transaction()
    await tx.start()
    try:  # the claim takes row locks: look, then roll back
        rows = await conn.fetch("EXPLAIN (ANALYZE, FORMAT JSON) " + components_store.CLAIM_DUE,
                                datetime.now(UTC), limit)
    finally:
        await tx.rollback()
    plan = rows[0][0]
    plan = plan[0] if isinstance(plan, list) else plan
    return {"execution_ms": round(plan["Execution Time"], 3),
            "planning_ms": round(plan["Planning Time"], 3),
            "indexes": sorted(_indexes(plan["Plan"])), "rows": plan["Plan"].get("Actual Rows")}


def _indexes(node: dict[str, Any]) -> set[str]:
    found = {node["Index Name"]} if "Index Name" in node else set()
    for child in node.get("Plans", []):
        found |= _indexes(child)
    return found


async def none_due(services: Any, conn: asyncpg.Connection, repeats: int) -> dict[str, Any]:
    """``sweep_due`` when nothing is due: the whole call (transaction, claim, commit)."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = await services.components.sweep_due(500)
        times.append(time.perf_counter() - t0)
        if sum(result.values()):
            raise RuntimeError(f"a card was due in the none-due sweep: {result}")
    cards = await conn.fetchval("SELECT count(*) FROM message_components")
    return {"cards": cards, "sweep_due_call": summary_ms(times),
            "claim_query": await claim_plan(conn, 500)}


async def with_due(services: Any, url: str, conn: asyncpg.Connection, tag: str,
                   count: int) -> dict[str, Any]:
    """Make ``count`` cards due, then time ``sweep_due_all`` handing every one to Main."""
    await dataset.load(url, tag, count, due=True)
    claim = await claim_plan(conn, 500)
    before = await conn.fetchval("SELECT max(id) FROM messages")
    t0 = time.perf_counter()
    result = await services.components.sweep_due_all(500)
    seconds = time.perf_counter() - t0
    handoffs = await conn.fetchval("""
        SELECT count(*) FROM messages m JOIN threads t ON t.id = m.thread_id
         WHERE t.kind = 'main' AND m.id > $1 AND m.source_meta ? 'askHandoff'""", before)
    moved = await conn.fetchval(
        "SELECT count(*) FROM message_components WHERE id LIKE $1 AND status = 'with-main'",
        f"bk{tag}%")
    if result["handed_to_main"] != count or handoffs != count or moved != count:
        raise RuntimeError(f"the sweep did not hand every due card over exactly once: "
                           f"{result}, {handoffs} hand-off messages, {moved} with Main")
    return {"due": count, "seconds": round(seconds, 3),
            "cards_per_s": round(count / seconds, 1), "result": result,
            "handoff_messages": handoffs, "claim_500": claim}
