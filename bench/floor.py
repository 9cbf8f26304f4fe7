"""(a) The floor: the statements the service runs for one round trip, sent straight with asyncpg.

One dedicated connection per client (no pool), the service's own SQL constants, the same
transactions and the same parameters, and nothing else: no validation, no projections, no
pool bookkeeping. Whatever the service costs beyond this is Python and plumbing.

The sequence mirrors, statement for statement (``bench.counting`` checks the count each run):
- the assistant row (``AgentMessageService.post``): BEGIN, thread, insert, COMMIT;
- ``ToolService.execute``: thread, stored result?, the call, then BEGIN, presence, tool row,
  carrier, push enqueue, component rows, COMMIT (``ComponentService.post_card``);
- ``ComponentService.answer``: BEGIN, load, CAS, mirror, answer message, wake, settle the
  carrier, cancel pending pushes, enqueue the withdraw, audit, COMMIT.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from bench.dataset import CARD_ARGS, CARD_OPTIONS
from maxclaw.components import store as components
from maxclaw.components import tool_store
from maxclaw.components.text import ASK_NOTE
from maxclaw.decisions import store as decisions
from maxclaw.presence import store as presence
from maxclaw.push import store as push
from maxclaw.timeline import store as timeline

CALL_ARGS = CARD_ARGS
QUESTION = CARD_ARGS["questions"][0]["question"]
TITLE = CARD_ARGS["title"]
ANSWER = {"selected": ["keep"], "text": None}
BODY = (f'Answer to "{TITLE}" (question card {{cid}} in a message above)\n'
        f"Question: {QUESTION}\nChose: Keep one version")
PUSH_ACTIONS = [{"id": "opt:keep", "title": "Keep one version"},
                {"id": "opt:drop", "title": "Remove it now"},
                {"id": "other", "title": "Other…", "input": True}]


async def post(conn: asyncpg.Connection, user_id: str, thread_id: str, call_id: str) -> str:
    """Post a card as the service does; returns the component id."""
    call = {"id": call_id, "name": "ask_user_question", "arguments": CALL_ARGS}
    async with conn.transaction():
        await conn.fetchrow(timeline.GET_THREAD, user_id, thread_id)
        await conn.fetchrow(timeline.INSERT_MESSAGE, user_id, thread_id, "assistant", None, None,
                            [call], None, None, None, False, None)
    thread = await conn.fetchrow(timeline.GET_THREAD, user_id, thread_id)
    await conn.fetchrow(tool_store.TOOL_RESULT, user_id, thread_id, call_id)
    found = await conn.fetchrow(tool_store.FIND_CALL, user_id, thread_id, [{"id": call_id}])
    cid = f"{call_id}:q1"
    now = datetime.now(UTC)
    async with conn.transaction():
        await conn.fetchval(presence.IS_WATCHING, user_id, thread_id, now)
        due = (now + timedelta(minutes=30)).isoformat()
        tool_row = await conn.fetchrow(
            timeline.INSERT_MESSAGE, user_id, thread_id, "tool", None,
            {"posted": True, "note": ASK_NOTE,
             "components": [{"id": cid, "kind": "choice", "answer_due_at": due}]},
            None, call_id,
            {"v": 1, "kind": "components", "states": {cid: {
                "status": "open", "answered_by": None, "answered_via": None, "answer": None,
                "due_at": due}}},
            {"tool": {"name": "ask_user_question", "status": 200}}, False, None)
        decision = await conn.fetchrow(
            decisions.INSERT_CARRIER, user_id, f"ask:{cid}", cid, thread_id, TITLE, QUESTION,
            CARD_OPTIONS, True, False, False)
        await conn.fetchrow(push.ENQUEUE, user_id, decision["id"], "notify", f"ask:{cid}", {
            "kind": "agent-question", "decision_id": decision["id"], "component_id": cid,
            "thread_id": thread_id, "title": thread["title"], "body": QUESTION,
            "actions": PUSH_ACTIONS, "reply": {"placeholder": "Reply…"},
            "collapse_id": f"ask:{cid}"})
        await conn.execute(components.INSERT_COMPONENTS, [cid], [user_id], [thread_id],
                           [found["id"]], [tool_row["id"]], ["choice"], ["normal"], [False],
                           [now + timedelta(minutes=30)], [decision["id"]])
    return cid


async def answer(conn: asyncpg.Connection, user_id: str, cid: str) -> None:
    """Answer a card as ``ComponentService.answer`` does (one transaction)."""
    async with conn.transaction():
        row = await conn.fetchrow(components.GET_WITH_CONTEXT, cid, user_id)
        new = await conn.fetchrow(components.CAS_ANSWER, cid, user_id,
                                  ["open", "revoked", "handed-back"], ANSWER, "card")
        if new is None:
            raise RuntimeError(f"the floor lost a CAS on {cid}: the benchmark is broken")
        await conn.execute(components.MIRROR, row["tool_message_id"], user_id, cid, {
            "status": new["status"], "answered_by": new["answered_by"],
            "answered_via": new["answered_via"], "answer": new["answer"], "due_at": None})
        await conn.fetchrow(timeline.INSERT_MESSAGE, user_id, row["thread_id"], "user",
                            BODY.format(cid=cid), None, None, None, None,
                            {"componentAnswer": {"componentId": cid, "answeredBy": "max",
                                                 "via": "card"}}, False, None)
        await conn.execute(timeline.WAKE_THREAD, user_id, row["thread_id"])
        settled = await conn.fetchrow(decisions.SETTLE, new["decision_id"], user_id,
                                      "Keep one version", "card")
        await conn.execute(push.CANCEL_PENDING_NOTIFICATIONS, user_id, settled["id"])
        await conn.fetchrow(push.ENQUEUE, user_id, settled["id"], "withdraw", f"ask:{cid}",
                            {"kind": "withdraw", "collapse_id": f"ask:{cid}"})
        await conn.execute(components.AUDIT, user_id, cid, row["status"], "answered", "max",
                           "card")


def statements_per_round_trip() -> dict[str, int]:
    """What the floor sends per round trip (BEGIN/COMMIT included), for the report."""
    return {"post": 4 + 3 + 7, "answer": 11}


async def round_trip(conn: asyncpg.Connection, user_id: str, thread_id: str,
                     call_id: str) -> Any:
    cid = await post(conn, user_id, thread_id, call_id)
    await answer(conn, user_id, cid)
