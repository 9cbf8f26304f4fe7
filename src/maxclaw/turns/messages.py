"""``POST /v1/agent/threads/{id}/messages``: what an agent runtime writes into a thread.

Assistant and tool rows carry the runtime's ``turn_id`` as a fencing token: a write from a turn
that is no longer the thread's running turn (its lease lapsed and the work was re-claimed, or it
finished) is refused with 409, so a runtime that froze and woke up cannot write into someone
else's turn. Event rows (e.g. a background job finished) enter the inbox and wake the thread;
a background job's start (``source_meta.backgroundJob.phase = "started"``) is history that
wakes nothing, and counts the job as running in the thread until its end (turns/background.py),
or until the runtime lease it was started under lapses (leases/service.py).

An assistant row with ``"execute": true`` also executes the service's own tools among its calls
(``ask_user_question`` posts its card) in the same transaction, and answers with their results:
one request and one commit where a post and an ``execute`` per call took two of each.
"""

from __future__ import annotations

from typing import Any

import asyncpg

from maxclaw.auth.service import Principal, parse_uuid
from maxclaw.cards.definitions import Card, normalize_tool_call
from maxclaw.components import post_store, tool_store
from maxclaw.components.server_tools import TOOL_SPECS as SERVICE_TOOLS
from maxclaw.components.server_tools import NeedsExecute, ToolService
from maxclaw.db.constraints import violated
from maxclaw.db.database import Database
from maxclaw.errors import Conflict, Invalid, NotFound, TurnStopped
from maxclaw.jsonlimits import MAX_SOURCE_META_BYTES, check_json_bytes
from maxclaw.leases.service import RuntimeLeaseService
from maxclaw.secrets.service import SecretService
from maxclaw.timeline import store as timeline_store
from maxclaw.turns import store as turn_store
from maxclaw.turns.background import MAX_RUNNING_JOBS, JobReport, job_report
from maxclaw.turns.guard import looks_forged

MAX_TEXT = 200_000
# the service's own notice kinds in source_meta (answers, hand-offs, expiries): a runtime
# cannot claim one
SERVICE_NOTICES = frozenset({"componentAnswer", "cardAnswer", "askHandoff", "askExpired",
                             "jobLost"})
STOPPED = ("Max stopped this turn: stop now and write nothing more. Input that waits stays "
           "queued; his next message starts a new turn.")
STALE_TURN = ("Turn {turn_id} is not this thread's running turn (its lease lapsed or it "
              "finished); claim a new turn before writing.")


def _text(value: Any, field: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise Invalid.at(["body", field], f"{field} must be a string")
    if len(value) > MAX_TEXT:
        raise Invalid.at(["body", field], f"{field} is at most {MAX_TEXT:,} characters")
    return value


def call_ids(calls: list[dict[str, Any]]) -> list[str] | None:
    """The ids of a row's tool calls: component ids, decision keys and the display are
    derived from them, so the echo guard refuses one that holds a secret."""
    return [c["id"] for c in calls] or None


def side_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """The fields of a runtime's row that are stored as written (never masked): the echo
    guard refuses the row when one of them holds a secret."""
    calls = fields.get("tool_calls") or []
    return {"source_meta": fields.get("source_meta"), "tool_call_id": fields.get("tool_call_id"),
            "tool_calls": [c["id"] for c in calls if isinstance(c, dict)] or None}


class AgentMessageService:
    """Assistant, tool and event rows from agent runtimes."""

    def __init__(self, db: Database, secrets: SecretService, leases: RuntimeLeaseService,
                 tools: ToolService | None = None) -> None:
        self.db = db
        self.secrets = secrets
        self.leases = leases  # a job started under a runtime lease is held by it
        self.tools = tools  # for "execute": true

    async def _insert(self, conn: asyncpg.Connection, who: Principal, thread_id: str,
                      **fields: Any) -> int:
        """Insert a runtime's row after the echo check, returning its id: a row that holds one
        of the thread's live secrets is stored masked and sensitive, its original sealed next
        to it; any other row is stored as the check read it (its JSON written out once)."""
        guarded = await self.secrets.guard(conn, who.user_id, thread_id,
                                           body=fields.get("body"), content=fields.get("content"),
                                           tool_calls=fields.get("tool_calls"),
                                           side=side_fields(fields))
        if guarded.sealed is None:
            fields.update(content=guarded.content, tool_calls=guarded.tool_calls)
            return await timeline_store.insert_message_id(conn, user_id=who.user_id,
                                                          thread_id=thread_id, **fields)
        meta = dict(fields.get("source_meta") or {})
        meta["secretEcho"] = {"components": list(guarded.components)}
        fields.update(body=guarded.body, content=guarded.content,
                      tool_calls=guarded.tool_calls, source_meta=meta, sensitive=True)
        row_id = await timeline_store.insert_message_id(conn, user_id=who.user_id,
                                                        thread_id=thread_id, **fields)
        await self.secrets.store_sealed(conn, who.user_id, thread_id, row_id, guarded.sealed)
        return row_id

    async def post(self, who: Principal, thread_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """Append the runtime's row; returns ``{"id", "guard"}`` (and ``"results"`` when an
        assistant row asks to ``execute``)."""
        thread_id = parse_uuid(thread_id)
        who.check_thread(thread_id)
        # the nesting was checked in the request's bytes (api/middleware.py, BodyGuard)
        role = body.get("role")
        turn_id = body.get("turn_id")
        if turn_id is not None and (isinstance(turn_id, bool) or not isinstance(turn_id, int)):
            raise Invalid.at(["body", "turn_id"], "turn_id must be an integer or null")
        execute = body.get("execute", False)
        if not isinstance(execute, bool) or (execute and role != "assistant"):
            raise Invalid.at(["body", "execute"], "execute is true or false, on an assistant row")
        if execute and self.tools is not None:
            return await self._post_and_execute(who, thread_id, body, turn_id, self.tools)
        async with self.db.transaction() as conn:
            thread = await timeline_store.get_thread(conn, who.user_id, thread_id)
            if thread is None:
                raise NotFound("No such thread.")
            who.check_writes_in(thread.kind)  # Main's thread: Main's own tokens only
            if turn_id is not None and role in ("assistant", "tool"):
                await self._check_turn(conn, who.user_id, thread_id, turn_id)
            if role == "assistant":
                return await self._assistant(conn, who, thread_id, body, turn_id)
            if role == "tool":
                return await self._tool(conn, who, thread_id, body, turn_id)
            if role == "event":
                return await self._event(conn, who, thread_id, body)
        raise Invalid.at(["body", "role"], "role must be assistant, tool or event")

    async def _post_and_execute(self, who: Principal, thread_id: str, body: dict[str, Any],
                                turn_id: int | None, tools: ToolService) -> dict[str, Any]:
        """The assistant row and its cards in one read and one statement (no BEGIN/COMMIT,
        unless the hints go after the commit: ``Database.writer``): the read (the thread,
        results already stored for these calls, presence, the thread's live secrets for the
        echo check), then ``components.post_store.post_cards`` writes the row,
        and per card its tool row, carriers, pushes and components, fenced by the turn. A
        retry (its calls already have results) writes nothing and replays them; a call that
        needs more than posting a card (a refusal, Main's tools) writes nothing here, and the
        row is posted and executed as two steps; a row that echoes a secret is written in one
        transaction with its sealed original (``_post_sealed``)."""
        content, calls = self._row_fields(body)
        ids = [c["id"] for c in calls]
        try:
            async with self.db.writer() as conn:
                context = await tool_store.post_context(conn, who.user_id, thread_id, ids,
                                                        tools.components.clock.now())
                if context is None:
                    raise NotFound("No such thread.")
                thread, done, watching, live, prefs = context
                who.check_writes_in(thread.kind)  # before a retry's replay, too
                if not done:
                    guard = "forged" if looks_forged(content) else None
                    self.secrets.refuse_echo(live, {"tool_calls": call_ids(calls)})
                    checked = self.secrets.guard_rows(live, who.user_id, thread_id,
                                                      body=content, tool_calls=calls or None)
                    if checked.sealed is not None:
                        return await self._post_sealed(who, thread_id, body, turn_id, tools)
                    cards, rows = tools.plan_posted(who, thread, calls, watching, prefs)
                    row_id, found, _ = await post_store.post_cards(
                        conn, who.user_id, thread_id, turn_id=turn_id, body=content,
                        tool_calls=calls or None,
                        source_meta={"guard": guard} if guard else None, sensitive=False,
                        cards=rows)
                    if row_id is None:
                        if not found:
                            raise NotFound("No such thread.")
                        raise await self._stale(conn, who.user_id, turn_id)
            if not done:  # committed: an answer needs not read the cards' definitions back
                for card in cards:
                    tools.components.remember(who.user_id, card)
                return {"id": row_id, "guard": guard, "results": [
                    {"tool_call_id": r.tool_call_id, "status": 200, "content": r.content,
                     "error": None} for r in rows]}
        except asyncpg.UniqueViolationError as exc:
            if not violated(exc, "messages_tool_result"):
                return await self._in_two_steps(who, thread_id, body, calls, tools)
            # the same post, concurrently, wrote these results first: replay its outcome
            done = [c["id"] for c in calls if c["name"] in SERVICE_TOOLS]
        except NeedsExecute:
            return await self._in_two_steps(who, thread_id, body, calls, tools)
        return await self._replay(who, thread_id, content, calls, done, tools)

    async def _replay(self, who: Principal, thread_id: str, content: str | None,
                      calls: list[dict[str, Any]], done: list[str],
                      tools: ToolService) -> dict[str, Any]:
        """A retry of a post whose response was lost: the row that carries these calls, and
        their results as execute replays them (any call still without one runs now)."""
        async with self.db.connection() as conn:
            found = await tool_store.call_context(conn, who.user_id, thread_id, done[0])
        call = found[2] if found else None
        if call is None:
            raise Conflict(f"Tool call {done[0]!r} already has a result in this thread.")
        return {"id": call.message_id, "guard": "forged" if looks_forged(content) else None,
                "results": await tools.executed(who, thread_id, calls)}

    async def _post_sealed(self, who: Principal, thread_id: str, body: dict[str, Any],
                           turn_id: int | None, tools: ToolService) -> dict[str, Any]:
        """A row that echoes one of the thread's secrets (rare): stored masked with its sealed
        original, and its cards, in one transaction of several statements."""
        content, calls = self._row_fields(body)
        try:
            async with self.db.transaction() as conn:
                context = await tool_store.post_context(conn, who.user_id, thread_id,
                                                        [c["id"] for c in calls],
                                                        tools.components.clock.now())
                if context is None:
                    raise NotFound("No such thread.")
                thread, done, watching, _, _ = context
                who.check_writes_in(thread.kind)
                if turn_id is not None:
                    await self._check_turn(conn, who.user_id, thread_id, turn_id)
                if not done:
                    row = await self._assistant(conn, who, thread_id, body, turn_id)
                    cards: list[Card] = []
                    results = await tools.run_posted(conn, who, thread, calls, row["id"],
                                                     turn_id, watching, cards)
            if not done:
                for card in cards:
                    tools.components.remember(who.user_id, card)
                return {**row, "results": results}
        except asyncpg.UniqueViolationError as exc:
            if exc.constraint_name != "messages_tool_result":
                return await self._in_two_steps(who, thread_id, body, calls, tools)
            done = [c["id"] for c in calls if c["name"] in SERVICE_TOOLS]
        except NeedsExecute:
            return await self._in_two_steps(who, thread_id, body, calls, tools)
        return await self._replay(who, thread_id, content, calls, done, tools)

    async def _in_two_steps(self, who: Principal, thread_id: str, body: dict[str, Any],
                            calls: list[dict[str, Any]], tools: ToolService) -> dict[str, Any]:
        """The row posted alone, then ``execute`` for each service call (its own transactions
        and its handling of refusals and races)."""
        row = await self.post(who, thread_id, {**body, "execute": False})
        return {**row, "results": await tools.executed(who, thread_id, calls)}

    async def _check_turn(self, conn: asyncpg.Connection, user_id: str, thread_id: str,
                          turn_id: int) -> None:
        # current_running_turn locks the turn row FOR SHARE until this write commits, so the
        # lease cannot lapse (and the work be re-claimed) between this check and the commit
        if await turn_store.current_running_turn(conn, user_id, thread_id) != turn_id:
            raise await self._stale(conn, user_id, turn_id)

    @staticmethod
    async def _stale(conn: asyncpg.Connection, user_id: str, turn_id: int | None) -> Conflict:
        """The refusal of a write whose turn is not running: ``turn_stopped`` when Max
        stopped it (the runtime ends its loop), else ``conflict`` (lapsed or finished)."""
        if turn_id is not None and await turn_store.turn_status(conn, user_id,
                                                                turn_id) == "stopped":
            return TurnStopped(STOPPED, data={"status": "stopped"})
        return Conflict(STALE_TURN.format(turn_id=turn_id))

    @staticmethod
    def _row_fields(body: dict[str, Any]) -> tuple[str | None, list[dict[str, Any]]]:
        """An assistant row's content and its normalised tool calls, validated."""
        content = _text(body.get("content"), "content")
        raw_calls = body.get("tool_calls") or []
        if not isinstance(raw_calls, list) or len(raw_calls) > 64:
            raise Invalid.at(["body", "tool_calls"], "tool_calls must be a list (at most 64)")
        calls = [normalize_tool_call(c) for c in raw_calls]
        if len({c["id"] for c in calls}) != len(calls):
            raise Invalid.at(["body", "tool_calls"], "tool call ids must be unique")
        return content, calls

    async def _assistant(self, conn: asyncpg.Connection, who: Principal, thread_id: str,
                         body: dict[str, Any], turn_id: int | None) -> dict[str, Any]:
        content, calls = self._row_fields(body)
        guard = "forged" if looks_forged(content) else None
        row_id = await self._insert(
            conn, who, thread_id, role="assistant", body=content,
            tool_calls=calls or None, source_meta={"guard": guard} if guard else None,
            turn_id=turn_id)
        return {"id": row_id, "guard": guard}

    async def _tool(self, conn: asyncpg.Connection, who: Principal, thread_id: str,
                    body: dict[str, Any], turn_id: int | None) -> dict[str, Any]:
        call_id = body.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            raise Invalid.at(["body", "tool_call_id"], "tool_call_id is required")
        try:
            async with conn.transaction():  # a savepoint: the duplicate must not poison the rest
                row_id = await self._insert(
                    conn, who, thread_id, role="tool",
                    tool_call_id=call_id, content=body.get("content"), turn_id=turn_id)
        except asyncpg.UniqueViolationError:
            raise Conflict(f"Tool call {call_id!r} already has a result.") from None
        return {"id": row_id, "guard": None}

    async def _event(self, conn: asyncpg.Connection, who: Principal, thread_id: str,
                     body: dict[str, Any]) -> dict[str, Any]:
        text = _text(body.get("body"), "body")
        if not text:
            raise Invalid.at(["body", "body"], "an event needs a body")
        meta = body.get("source_meta")
        if meta is not None and not isinstance(meta, dict):
            raise Invalid.at(["body", "source_meta"], "source_meta must be an object")
        check_json_bytes(meta, ["body", "source_meta"], MAX_SOURCE_META_BYTES)
        # the service's own notice kinds cannot be claimed by a runtime
        if meta and (SERVICE_NOTICES & meta.keys()):
            raise Invalid.at(["body", "source_meta"], ", ".join(sorted(SERVICE_NOTICES))
                             + " are written by the service only")
        job = job_report(meta)
        if job is not None:
            await self._track_job(conn, who.user_id, thread_id, job)
        quiet = job is not None and job.started  # history: a start wakes nothing
        row_id = await self._insert(conn, who, thread_id, role="event", body=text,
                                    source_meta=meta, delivered=quiet)
        if not quiet:
            await timeline_store.wake_thread(conn, who.user_id, thread_id)
        return {"id": row_id, "guard": None}

    async def _track_job(self, conn: asyncpg.Connection, user_id: str, thread_id: str,
                         job: JobReport) -> None:
        """The thread's set of running jobs, before the event row: the thread is locked first,
        as an input's wake-up locks it, so ``finish`` orders against this event. A lease is
        locked (a start) or the leased job released (an end) before the thread, the order the
        lapse tick takes them in (leases/store.py)."""
        if not job.started:
            await self.leases.release_job(conn, user_id, thread_id, job.job_id)
            await timeline_store.job_finished(conn, user_id, thread_id, job.job_id)
            return
        if job.lease_id is not None:
            await self.leases.hold_job(conn, user_id, thread_id, job.job_id, job.lease_id)
        if await timeline_store.job_started(conn, user_id, thread_id,
                                            job.job_id) > MAX_RUNNING_JOBS:
            raise Invalid.at(["body", "source_meta", "backgroundJob", "job_id"],
                             f"a thread has at most {MAX_RUNNING_JOBS} background jobs running; "
                             "report the finished ones (phase: finished) first")
