"""The fused answer statement (``store.ANSWER_SETTLE``) is an optimisation of the effect
functions, never a second implementation: the same answers, run both ways on PostgreSQL, write
the same rows.

Two users are brought to the same state (a card posted to a device-holding user, then moved
through the real paths); one answers through ``Answers.answer_fused`` (one statement), the
other through the transaction path (``CardJob.move`` + ``effects.run``, taken whenever a guard
runs — here a guard that does nothing). Every row either wrote is compared, with each user's
own ids replaced by placeholders: the component, its ``display.states`` mirror, the messages,
the carrier, the push outbox, the audit trail and the wake-ups. The mirror written by SQL is
also compared with ``projections.state_of`` of the row (the one Python builder).
"""

from __future__ import annotations

import json
import re
from typing import Any

import asyncpg
import pytest

from maxclaw.auth.service import Principal
from maxclaw.components import store
from maxclaw.components.machine import Status
from maxclaw.components.projections import state_of
from tests.cards import CHOICE, execute, new_thread, post_call, post_card
from tests.conftest import Actor, Harness


async def _noop_guard(conn: asyncpg.Connection) -> None:
    """A guard that spends nothing: it only sends the answer down the transaction path."""


async def _device(h: Harness, a: Actor) -> None:
    async with h.services.db.connection() as conn:
        await conn.execute(
            "INSERT INTO push_devices (user_id, platform, config) VALUES ($1, 'webhook', $2)",
            a.user_id, {"url": "https://example.org/hook", "address": "https://example.org/hook"})


async def _main_tool(a: Actor, name: str, args: dict[str, Any]) -> None:
    call_id = await post_call(a.agent, a.main_thread_id, name, args)
    resp = await execute(a.agent, a.main_thread_id, call_id)
    assert resp.status_code == 200, resp.text


async def _bring(h: Harness, a: Actor, status: Status) -> tuple[str, str, str]:
    """A card of ``a`` (with an expiry, so the mirror carries one) in ``status``; returns
    ``(thread id, call id, component id)``."""
    await _device(h, a)
    tid = await new_thread(a.user)
    call_id, content = await post_card(a.agent, tid, CHOICE, expires_after_minutes=600)
    cid = str(content["components"][0]["id"])
    if status is Status.OPEN:
        return tid, call_id, cid
    resp = await a.user.post(f"/v1/components/{cid}/to-main")
    assert resp.status_code == 200, resp.text
    if status is Status.WITH_MAIN:
        return tid, call_id, cid
    if status is Status.HANDED_BACK:
        await _main_tool(a, "hand_back", {"component_id": cid, "note": "yours"})
        return tid, call_id, cid
    await _main_tool(a, "answer_for_max", {"component_id": cid, "selected": ["drop"],
                                           "reason": "usual"})
    assert status is Status.REVOKED
    resp = await a.user.post(f"/v1/components/{cid}/revoke")
    assert resp.status_code == 200, resp.text
    return tid, call_id, cid


INSTANT = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?")
CALL_ID = re.compile(r"call_\d+")
TABLES = {
    "component": "SELECT status, answer, answered_by, answered_via, main_reason, due_at IS NULL"
                 " AS no_due, answered_at IS NOT NULL AS answered, seen_at, withdrawn_reason,"
                 " superseded_by, decision_id IS NOT NULL AS carried"
                 " FROM message_components WHERE user_id = $1::uuid",
    "mirror": "SELECT m.display -> 'states' AS states FROM messages m"
              " WHERE m.user_id = $1::uuid AND m.role = 'tool' AND m.display ? 'states'",
    "messages": "SELECT thread_id, role, body, content, tool_call_id, display, source_meta,"
                " sensitive, delivered_at IS NULL AS waiting FROM messages"
                " WHERE user_id = $1::uuid ORDER BY id",
    "carrier": "SELECT kind, status, title, body, answer_text, settled_via, settled_at IS NULL"
               " AS unsettled FROM decisions WHERE user_id = $1::uuid ORDER BY id",
    "outbox": "SELECT kind, status, collapse_id, payload, last_error, attempts"
              " FROM push_outbox WHERE user_id = $1::uuid ORDER BY id",
    "audit": "SELECT component_id, from_status, to_status, actor, via,"
             " token_id IS NULL AS tokenless"
             " FROM component_audit WHERE user_id = $1::uuid ORDER BY id",
    "turns": "SELECT thread_id, status FROM turns WHERE user_id = $1::uuid ORDER BY id",
}


async def _written(h: Harness, a: Actor, names: dict[str, str]) -> dict[str, Any]:
    """Every row of ``a`` in the tables a move writes, as JSON with ``a``'s ids replaced."""
    async with h.services.db.connection() as conn:
        rows = {name: [dict(r) for r in await conn.fetch(sql, a.user_id)]
                for name, sql in TABLES.items()}
        ids = await conn.fetch("SELECT id::text FROM decisions WHERE user_id = $1::uuid"
                               " UNION ALL SELECT id::text FROM push_devices"
                               " WHERE user_id = $1::uuid", a.user_id)
    text = json.dumps(rows, default=str, sort_keys=True)
    for value, placeholder in names.items():
        text = text.replace(value, placeholder)
    for i, r in enumerate(ids):  # carrier and device ids, as numbers inside payloads
        text = text.replace(f'"decision_id": {r[0]}', f'"decision_id": "<id{i}>"')
    # the two users acted moments apart: instants compare by their form, not their value
    text = INSTANT.sub("<instant>", text)
    text = CALL_ID.sub("<call>", text)  # the tests' call ids count up across both users
    written: dict[str, Any] = json.loads(text)
    return written


@pytest.mark.parametrize(("status", "via"), [
    (Status.OPEN, "card"), (Status.OPEN, "decision"), (Status.OPEN, "push"),
    (Status.HANDED_BACK, "card"), (Status.REVOKED, "card"), (Status.WITH_MAIN, "decision"),
])
async def test_the_fused_answer_writes_what_the_effect_functions_write(
        harness: Harness, status: Status, via: str) -> None:
    fused, split = await harness.actor("fused"), await harness.actor("split")
    names: dict[str, dict[str, str]] = {}
    for a in (fused, split):
        tid, call_id, cid = await _bring(harness, a, status)
        names[a.name] = {a.user_id: "<user>", tid: "<thread>", a.main_thread_id: "<main>",
                         call_id: "<card>"}
        if a is fused:
            fused_cid = cid
        else:
            split_cid = cid
    before = {a.name: await _written(harness, a, names[a.name]) for a in (fused, split)}
    assert before["fused"] == before["split"]  # the same state, reached the same way

    answers = harness.services.components.answers
    await answers.answer(Principal(fused.user_id, "fused", "user"), fused_cid, ["keep"],
                         "note", via)
    await answers.answer(Principal(split.user_id, "split", "user"), split_cid, ["keep"],
                         "note", via, guard=_noop_guard)

    after = {a.name: await _written(harness, a, names[a.name]) for a in (fused, split)}
    for table in TABLES:
        assert after["fused"][table] == after["split"][table], table
    assert after["fused"] != before["fused"]  # the answer wrote something to compare
    assert len(after["fused"]["audit"]) == len(before["fused"]["audit"]) + 1

    # the mirror the statements wrote is state_of's entry for the row they moved
    for a, cid in ((fused, fused_cid), (split, split_cid)):
        async with harness.services.db.connection() as conn:
            row = await store.get_with_context(conn, a.user_id, cid)
            states = await conn.fetchval(
                "SELECT display -> 'states' FROM messages WHERE user_id = $1::uuid AND id = $2",
                a.user_id, row.tool_message_id if row else None)
        assert row is not None
        assert states[cid] == state_of(row)


async def test_every_transition_mirrors_state_of(harness: Harness) -> None:
    """``store.TRANSITION``'s mirror (to Main, hand-back, revoke, withdraw) equals
    ``state_of`` of the moved row, seen_at and expiry included."""
    a = await harness.actor("max")
    for status in (Status.WITH_MAIN, Status.HANDED_BACK, Status.REVOKED):
        _, _, cid = await _bring(harness, a, status)
        async with harness.services.db.connection() as conn:
            row = await store.get_with_context(conn, a.user_id, cid)
            assert row is not None and row.status == status
            states = await conn.fetchval(
                "SELECT display -> 'states' FROM messages WHERE user_id = $1::uuid AND id = $2",
                a.user_id, row.tool_message_id)
        assert states[cid] == state_of(row), status
