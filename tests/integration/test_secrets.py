"""A sensitive answer reaches the thread as his message and nowhere else: the row holds a masked
copy, the plaintext is sealed in ``message_secrets`` and only the model's claim opens it."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from tests.cards import SECRET, new_thread, post_card
from tests.conftest import Harness

PLANTED = "sk-planted-7f3a9c1e5b"


async def every_table(h: Harness) -> list[str]:
    """Every column of every row of every table, as text (bytea boxes included, as hex)."""
    hits: list[str] = []
    async with h.services.db.connection() as conn:
        tables = [r["tablename"] for r in await conn.fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
        for table in tables:
            for row in await conn.fetch(f'SELECT * FROM "{table}"'):  # test-only, fixed names
                record = dict(row)
                if PLANTED in json.dumps(record, default=str):
                    hits.append(table)
    return hits


async def every_user_response(h: Harness, user: Any, tid: str, cid: str) -> str:
    texts = []
    for path in ["/v1/threads", f"/v1/threads/{tid}", f"/v1/threads/{tid}/messages",
                 f"/v1/components/{cid}", "/v1/decisions?status=all", "/v1/me"]:
        resp = await user.get(path)
        assert resp.status_code == 200, (path, resp.text)
        texts.append(resp.text)
    return "\n".join(texts)


@pytest.mark.parametrize("via", ["card", "decision"])
async def test_the_answer_reaches_the_thread_as_his_message_and_nowhere_else(
        harness: Harness, caplog: pytest.LogCaptureFixture, via: str) -> None:
    caplog.set_level(logging.DEBUG)
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    call_id, _ = await post_card(a.agent, tid, SECRET)
    cid = f"{call_id}:q3"
    if via == "card":
        resp = await a.user.post(f"/v1/components/{cid}/answer", json={"text": PLANTED})
    else:
        decision = (await a.user.get("/v1/decisions")).json()["decisions"][0]
        resp = await a.user.post(f"/v1/decisions/{decision['id']}/settle", json={"text": PLANTED})
    assert resp.status_code == 200, resp.text
    assert PLANTED not in resp.text
    # the row is sensitive and masked; its box is sealed; the plaintext is in no table
    async with harness.services.db.connection() as conn:
        rows = await conn.fetch(
            "SELECT m.body, m.sensitive, m.display, s.state, s.key_id, s.kind FROM messages m"
            " JOIN message_secrets s ON s.message_id = m.id")
    assert len(rows) == 1 and rows[0]["sensitive"] is True and rows[0]["state"] == "sealed"
    assert rows[0]["kind"] == "answer" and f"Secret answer: ••••[card {cid}]" in rows[0]["body"]
    assert json.loads(json.dumps(rows[0]["display"])) == {"line": "Submitted (not echoed)"}
    assert await every_table(harness) == []
    responses = await every_user_response(harness, a.user, tid, cid)
    assert PLANTED not in responses
    msgs = (await a.user.get(f"/v1/threads/{tid}/messages")).json()["messages"]
    bubble = next(m for m in msgs if m["role"] == "user")
    assert bubble["body"] is None and bubble["display"]["line"] == "Submitted (not echoed)"
    component = (await a.user.get(f"/v1/components/{cid}")).json()
    assert component["answer"] == {"selected": [], "hidden": True}
    tool = next(m for m in msgs if m["role"] == "tool")
    assert tool["display"]["states"][cid]["answer"] == {"selected": [], "hidden": True}
    decision = (await a.user.get("/v1/decisions?status=all")).json()["decisions"][0]
    assert decision["status"] == "settled" and PLANTED not in (decision["answer_text"] or "")
    assert PLANTED not in caplog.text
    # the model-facing projection opens it (the positive control for the searches above)
    claim = await a.agent.post("/v1/agent/turns/claim", json={"wait_s": 0})
    assert claim.status_code == 200, claim.text
    assert f"Secret answer: {PLANTED}" in claim.text
    assert PLANTED in (await a.agent.get(f"/v1/agent/threads/{tid}/history")).text
