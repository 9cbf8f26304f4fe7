"""Issue 34, finding 2: byte budgets count every column a page returns, ``source_meta``
included, and an agent's ``source_meta`` is capped on write.

Before, an event row with a 1 MiB ``source_meta`` counted as small: a page meant to be at most
1 MiB returned 19 MB, and an agent could write such rows at will."""

from __future__ import annotations

import json

from maxclaw.jsonlimits import MAX_SOURCE_META_BYTES
from maxclaw.timeline.store import PAGE_BYTES
from tests.conftest import Harness

BIG_META_ROWS = """
INSERT INTO messages (user_id, thread_id, role, body, source_meta, delivered_at)
SELECT $1::uuid, $2::uuid, 'event', 'e' || g,
       jsonb_build_object('blob', repeat('m', $3)), now()
  FROM generate_series(1, $4) g ORDER BY g
"""


async def test_an_oversized_source_meta_is_refused_naming_the_field(harness: Harness) -> None:
    max_ = await harness.actor("max")
    path = f"/v1/agent/threads/{max_.main_thread_id}/messages"
    resp = await max_.agent.post(path, json={"role": "event", "body": "done",
                                             "source_meta": {"blob": "m" * MAX_SOURCE_META_BYTES}})
    assert resp.status_code == 422, resp.text
    assert resp.json()["data"]["errors"][0]["loc"] == ["body", "source_meta"]
    resp = await max_.agent.post(path, json={"role": "event", "body": "done",
                                             "source_meta": {"blob": "m" * 1000}})
    assert resp.status_code == 201, resp.text


async def test_a_history_page_counts_source_meta(harness: Harness) -> None:
    max_ = await harness.actor("max")
    resp = await max_.user.post("/v1/threads", json={"title": "t", "kind": "normal"})
    tid = resp.json()["id"]
    async with harness.services.db.connection() as conn:
        await conn.execute(BIG_META_ROWS, max_.user_id, tid, 600_000, 8)
    after, pages, largest = 0, 0, 0
    while after is not None:
        page = await max_.user.get(f"/v1/threads/{tid}/messages",
                                   params={"after_id": after, "limit": 100})
        assert page.status_code == 200
        largest = max(largest, len(page.content))
        pages += 1
        after = page.json()["next_after_id"]
    # at most the budget, or one row over it: two 600 KB rows, never all eight (4.8 MB)
    assert largest < PAGE_BYTES + 700_000, largest
    assert pages >= 4
    meta = json.loads(page.content)["messages"][-1]["source_meta"]
    assert len(meta["blob"]) == 600_000
