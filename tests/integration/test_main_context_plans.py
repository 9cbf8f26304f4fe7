"""Main's context reads its rows by their keys (the plan rules of test_query_plans.py, on the
same load of 20,000 cards, a clone of its template): the hand-off's excerpt (one statement for
a sweep's batch), read_thread's gate and window; list_open_questions reaches the cards through
the threads' index and never reads a big table whole."""

from __future__ import annotations

import re
from typing import Any

from maxclaw.components import main_store
from maxclaw.db.database import connect
from tests import plans
from tests.conftest import Harness
from tests.integration.test_query_plans import (
    _assert_indexed,
    _big_tables,
    _busy_actor,
    _plan,
    counted,  # noqa: F401 (fixture)
    database_url,  # noqa: F401 (fixture: a clone of the loaded template)
    plans_template,  # noqa: F401 (fixture)
)


def _unpartitioned(name: str | None) -> str | None:
    """A partition's or a partition's index's name without the ``_p<i>`` that
    ``maxclaw.ops.partition`` gives it (CI runs these tests on an 8-partition schema too)."""
    return None if name is None else re.sub(r"_p\d+$", "", name)


async def _cards_of(url: str, user_id: str, n: int) -> list[Any]:
    conn = await connect(url)
    try:
        return list(await conn.fetch(
            "SELECT user_id::text, thread_id::text, message_id FROM message_components"
            " WHERE user_id = $1::uuid ORDER BY id LIMIT $2", user_id, n))
    finally:
        await conn.close()


async def test_main_context_statements_use_indexes_only(
        counted: tuple[Harness, Any], database_url: str) -> None:  # noqa: F811
    h, _ = counted
    actor = await _busy_actor(h, database_url)
    cards = await _cards_of(database_url, actor.user_id, 5)
    assert len({c["thread_id"] for c in cards}) > 1
    keys = [c["user_id"] for c in cards], [c["thread_id"] for c in cards], \
        [c["message_id"] for c in cards]
    thread = cards[0]["thread_id"]
    await _assert_indexed(database_url, [
        (main_store.EXCERPTS, (*keys, 6, 600)),
        (main_store.READ_GATE, (actor.user_id, thread)),
        (main_store.READ_WINDOW, (actor.user_id, thread, None, 50, 65536)),
        (main_store.READ_WINDOW, (actor.user_id, thread, cards[0]["message_id"], 50, 65536)),
        (main_store.HAS_OLDER, (actor.user_id, thread, cards[0]["message_id"])),
    ])


async def test_open_questions_reads_no_big_table_whole(
        counted: tuple[Harness, Any], database_url: str) -> None:  # noqa: F811
    """The user's threads are walked (as the thread list walks them: a user has tens of
    threads, not thousands of cards); their cards come by message_components_thread."""
    h, _ = counted
    actor = await _busy_actor(h, database_url)
    conn = await connect(database_url)
    try:
        big, _ = await _big_tables(conn)
        for mode in plans.MODES:
            nodes = await _plan(conn, main_store.OPEN_QUESTIONS, (actor.user_id, 101), mode)
            seq = [n["Relation Name"] for n in nodes
                   if n["Node Type"] == "Seq Scan" and n.get("Relation Name") in big]
            assert not seq, f"{mode}: sequential scan of {seq}"
            on_cards = [n for n in nodes
                        if _unpartitioned(n.get("Relation Name")) == "message_components"]
            assert on_cards and all(n["Node Type"] != "Seq Scan" for n in on_cards), nodes
            indexes = {_unpartitioned(n.get("Index Name")) for n in nodes}
            assert "message_components_thread" in indexes, nodes
    finally:
        await conn.close()
