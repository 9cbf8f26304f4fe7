"""The runtime: claim a turn, run the loop of seed 004, finish, claim again.

    for step in range(max_steps):
        reply = model(system + history)          # one model request
        post the assistant row (turn_id fences it; "execute": true runs service tools in it)
        if no tool calls: break                  # the turn ends
        run each local call here, its result as a tool row
        history += inbox()                       # the step boundary: only here does news enter
    finish()                                     # reports open cards; requeues waiting input

Nothing waits for a person: ``ask_user_question`` returns ``{"posted": true}`` at once and the
answer comes back as a user message, through the inbox of a running turn or by waking the
thread. A lease heartbeat runs beside the turn; when the service answers ``409`` (the lease
lapsed and the work was re-queued, maybe already re-claimed), the runtime drops the turn
without writing anything more. When Max pressed Stop, the next write (or heartbeat) answers
``409 turn_stopped``: the runtime ends its loop the same way and reports the turn ``stopped``.

Background jobs are reported under a runtime lease (``POST /v1/agent/leases``), taken when
the first job starts and heartbeated beside everything else for the runtime's life: if the
runtime dies, the lease lapses and the service ends its jobs as lost (a ``jobLost`` event),
so their threads stop saying "working in the background". A lease the service no longer
knows (``404``/``409``) is replaced by a new one at the next job's start; a service without
leases (an older one) gets the job reported without one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import uuid
from collections import deque
from collections.abc import Awaitable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

import httpx

from maxclaw.client.http import AgentClient, ApiError
from maxclaw.client.runtime.model import Model
from maxclaw.client.runtime.prompt import MAIN_PROMPT, SYSTEM_PROMPT
from maxclaw.client.runtime.workspace_tools import NAMES as LOCAL_NAMES
from maxclaw.client.runtime.workspace_tools import SPECS as LOCAL_SPECS
from maxclaw.client.runtime.workspace_tools import BackgroundJob, LocalTools
from maxclaw.wire.models import Claim, Finished

log = logging.getLogger("maxclaw.client.runtime")
T = TypeVar("T")
MAX_STEPS = 40
INTERRUPTED = {"error": "interrupted: the runtime that ran this call stopped before it "
                        "finished. Check the state and run it again if it is still needed."}


class TurnLostError(Exception):
    """The service no longer counts this runtime's turn as running (409): stop writing."""


class TurnStoppedError(TurnLostError):
    """Max stopped the turn (409 ``turn_stopped``): end the loop, write nothing more."""


STOPPED_CODE = "turn_stopped"

# The command as a job report's source_meta carries it: the service takes at most 16 KiB of
# source_meta, and a report it refuses would leave the job counted (or never counted).
META_COMMAND_CHARS = 2_000

@dataclass
class TurnReport:
    turn_id: int
    thread_id: str
    requests: int = 0
    finished: Finished | None = None
    lost: bool = False
    stopped: bool = False  # Max pressed Stop: the loop ended at its next write


@dataclass
class Event:
    """One thing the runtime did, with the wall-clock time (the demo and tests read these)."""

    kind: str  # claim | model_request | tool | inbox | finish | lost | stopped
    #            | lease | lease_lost | background_start
    #            | background_exit
    thread_id: str
    turn_id: int | None
    at: datetime = field(default_factory=lambda: datetime.now(UTC))
    data: dict[str, Any] = field(default_factory=dict)


def default_runtime_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class AgentRuntime:
    """One runtime: runs one turn at a time; background jobs run beside it."""

    def __init__(self, client: AgentClient, model: Model, tools: LocalTools, *,
                 runtime_id: str | None = None, system_prompt: str = SYSTEM_PROMPT,
                 main_prompt: str = MAIN_PROMPT, max_steps: int = MAX_STEPS) -> None:
        self.client = client
        self.model = model
        self.tools = tools
        self.tools.on_exit = self._report_exit
        self.tools.on_start = self._report_start
        self.runtime_id = runtime_id or default_runtime_id()
        self.system_prompt = system_prompt
        self.main_prompt = main_prompt  # for the turns of Main's thread (kind main)
        self.max_steps = max_steps
        self.events: deque[Event] = deque(maxlen=10_000)
        self._stopped: set[int] = set()  # turns whose heartbeat heard 409 turn_stopped
        self.lease_id: str | None = None  # the runtime lease background jobs are reported under
        self._lease_beat: asyncio.Task[None] | None = None
        self._lease_lock = asyncio.Lock()

    def _note(self, kind: str, thread_id: str, turn_id: int | None, **data: Any) -> None:
        self.events.append(Event(kind, thread_id, turn_id, data=data))

    # ----- the claim loop -----

    async def run_forever(self, stop: asyncio.Event | None = None, wait_s: float = 25) -> None:
        """Claim and run turns until ``stop`` is set."""
        stop = stop or asyncio.Event()
        failures = 0
        while not stop.is_set():
            try:
                await self._claim_and_run_unless_stopped(stop, wait_s)
                failures = 0
            except ApiError as exc:
                if exc.status in (401, 403):
                    raise  # a wrong token does not get better by retrying
                failures += 1
                log.warning("claim failed", extra={"code": exc.code, "attempts": failures})
            except httpx.TransportError as exc:
                failures += 1
                log.warning("service unreachable", extra={"error": type(exc).__name__,
                                                          "attempts": failures})
            if failures:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), min(30.0, 0.5 * 2**failures))

    async def _claim_and_run_unless_stopped(self, stop: asyncio.Event, wait_s: float) -> None:
        """A stop interrupts a waiting claim at once; a turn that started runs to its end."""
        claim = await self.client.claim_unless_stopped(stop, wait_s, self.runtime_id)
        if claim is not None:
            await self.run_turn(claim)

    async def run_once(self, wait_s: float = 0) -> TurnReport | None:
        """Claim one turn (waiting up to ``wait_s``) and run it; None if none was queued."""
        claim = await self.client.claim(wait_s=wait_s, runtime_id=self.runtime_id)
        return None if claim is None else await self.run_turn(claim)

    # ----- one turn -----

    async def run_turn(self, claim: Claim) -> TurnReport:
        """Run a claimed turn to its end (or until its lease is lost)."""
        report = TurnReport(claim.turn.id, claim.turn.thread_id)
        self._note("claim", report.thread_id, report.turn_id,
                   history=len(claim.messages))
        log.info("turn started", extra={"turn_id": report.turn_id, "thread_id": report.thread_id})
        lease_s = (claim.turn.lease_until - datetime.now(UTC)).total_seconds()
        work = asyncio.create_task(self._steps(claim, report))
        beat = asyncio.create_task(self._heartbeat(report.turn_id, lease_s, work))
        try:
            report.finished = await work
        except TurnStoppedError:
            report.stopped = True
        except TurnLostError:
            report.lost = True
        except asyncio.CancelledError:
            if not (beat.done() and not beat.cancelled() and work.cancelled()):
                raise  # cancelled from outside, not by the heartbeat's 409
            report.stopped = report.turn_id in self._stopped
            report.lost = not report.stopped
        finally:
            beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beat
            self._stopped.discard(report.turn_id)
        if report.stopped:
            self._note("stopped", report.thread_id, report.turn_id)
            log.warning("turn stopped by Max; ended its loop",
                        extra={"turn_id": report.turn_id, "thread_id": report.thread_id})
        if report.lost:
            self._note("lost", report.thread_id, report.turn_id)
            log.warning("turn lost (lease lapsed); dropped it",
                        extra={"turn_id": report.turn_id, "thread_id": report.thread_id})
        return report

    async def _heartbeat(self, turn_id: int, lease_s: float, work: asyncio.Task[Any]) -> None:
        interval = max(0.2, lease_s / 3)
        while True:
            await asyncio.sleep(interval)
            try:
                await self.client.heartbeat(turn_id)
            except ApiError as exc:
                if exc.status in (404, 409):
                    if exc.code == STOPPED_CODE:
                        self._stopped.add(turn_id)
                    work.cancel()
                    return  # the turn is someone else's now
                log.warning("heartbeat failed", extra={"turn_id": turn_id, "code": exc.code})
            except httpx.TransportError as exc:
                log.warning("heartbeat failed", extra={"turn_id": turn_id,
                                                       "error": type(exc).__name__})

    async def _steps(self, claim: Claim, report: TurnReport) -> Finished:
        thread_id, turn_id = claim.turn.thread_id, claim.turn.id
        offered = await self.client.tools(thread_id)
        service = {t.function.get("name") for t in offered}
        specs = [t.model_dump() for t in offered] + LOCAL_SPECS
        history = await self._complete_dangling(thread_id, turn_id,
                                                [m.wire() for m in claim.messages], service)
        system = self.main_prompt if claim.thread.kind == "main" else self.system_prompt
        for _ in range(self.max_steps):
            messages = [{"role": "system", "content": system}, *history]
            report.requests += 1
            self._note("model_request", thread_id, turn_id, n=report.requests)
            reply = await self.model.complete(messages, specs)
            # fresh ids: component ids are "<call id>:<question id>" and must be unique
            # service-wide, and some servers number their calls call_0, call_1, …
            calls = [{**c, "id": f"call_{uuid.uuid4().hex[:24]}"} for c in reply.tool_calls]
            # a row with service calls is executed in the same request (docs/api.md)
            execute = any(c["function"]["name"] in service for c in calls)
            posted = await self._write(self.client.post_assistant(
                thread_id, reply.content, calls, turn_id, execute=execute))
            history.append({"role": "assistant", "content": reply.content,
                            **({"tool_calls": calls} if calls else {})})
            if posted.guard:
                self._note("forged", thread_id, turn_id, message_id=posted.id)
            if not calls:
                break
            ran = {r.tool_call_id: r.content for r in posted.results or []}
            for call in calls:
                if call["id"] in ran:
                    self._note("tool", thread_id, turn_id, name=call["function"]["name"],
                               call_id=call["id"])
                    content = ran[call["id"]]
                else:
                    content = await self._run_call(thread_id, turn_id, call, service)
                history.append({"role": "tool", "tool_call_id": call["id"],
                                "content": json.dumps(content, ensure_ascii=False)})
            delivered = await self._write(self.client.inbox(turn_id))
            if delivered:
                self._note("inbox", thread_id, turn_id, count=len(delivered),
                           contents=[m.content for m in delivered])
            history.extend(m.wire() for m in delivered)
        finished = await self._write(self.client.finish(turn_id))
        self._note("finish", thread_id, turn_id, requests=report.requests,
                   open_components=finished.open_components, requeued=finished.requeued)
        log.info("turn finished", extra={"turn_id": turn_id, "thread_id": thread_id,
                                         "count": report.requests})
        return finished

    async def _write(self, call: Awaitable[T]) -> T:
        """Await a write; a 409 means the turn is no longer ours."""
        try:
            return await call
        except ApiError as exc:
            if exc.status == 409 and exc.code == STOPPED_CODE:
                raise TurnStoppedError(exc.message) from exc
            if exc.status == 409 and exc.code == "conflict":
                raise TurnLostError(exc.message) from exc
            raise

    async def _run_call(self, thread_id: str, turn_id: int, call: dict[str, Any],
                        service: set[Any]) -> Any:
        name = call["function"]["name"]
        self._note("tool", thread_id, turn_id, name=name, call_id=call["id"])
        if name in service:
            _, executed = await self._write(self.client.execute(thread_id, call["id"]))
            return executed.content  # the service wrote the tool row
        if name in LOCAL_NAMES:
            try:
                args = json.loads(call["function"]["arguments"] or "{}")
            except ValueError:
                args = None
            content = (await self.tools.call(name, args, thread_id) if isinstance(args, dict)
                       else {"error": "arguments must be a JSON object"})
        else:
            content = {"error": f"no tool named {name!r} in this thread"}
        await self._write(self.client.post_tool_result(thread_id, call["id"], content, turn_id))
        return content

    async def _complete_dangling(self, thread_id: str, turn_id: int,
                                 history: list[dict[str, Any]],
                                 service: set[Any]) -> list[dict[str, Any]]:
        """Give every call of the history a result before the next model request.

        A runtime that died between posting a call and its result leaves the call open.
        Service tools are executed now (``execute`` is idempotent: a call that already ran
        is not run again); a local call is reported as interrupted.
        """
        answered = {m.get("tool_call_id") for m in history if m.get("role") == "tool"}
        out: list[dict[str, Any]] = []
        i = 0
        while i < len(history):
            message = history[i]
            out.append(message)
            i += 1
            calls = message.get("tool_calls") or []
            while i < len(history) and history[i].get("role") == "tool":
                out.append(history[i])
                i += 1
            for call in calls:
                if call["id"] in answered:
                    continue
                name = call["function"]["name"]
                if name in service:
                    _, executed = await self._write(self.client.execute(thread_id, call["id"]))
                    content = executed.content
                else:
                    content = INTERRUPTED
                    await self._write(self.client.post_tool_result(thread_id, call["id"],
                                                                   content, turn_id))
                self._note("tool", thread_id, turn_id, name=name, call_id=call["id"],
                           resumed=True)
                out.append({"role": "tool", "tool_call_id": call["id"],
                            "content": json.dumps(content, ensure_ascii=False)})
        return out

    # ----- the runtime lease -----

    async def _lease(self) -> str | None:
        """The runtime lease, taken (and its heartbeat started) on first use; None when the
        service cannot give one (an older service, or it is unreachable now)."""
        async with self._lease_lock:
            if self.lease_id is not None:
                return self.lease_id
            try:
                lease = await self.client.take_lease(self.runtime_id)
            except (ApiError, httpx.TransportError) as exc:
                log.warning("could not take a runtime lease; jobs are reported without one",
                            extra={"error": str(exc)[:200]})
                return None
            self.lease_id = lease.id
            self._note("lease", "", None, lease_id=lease.id)
            if self._lease_beat is not None:
                self._lease_beat.cancel()
            self._lease_beat = asyncio.create_task(self._keep_lease(lease.id, lease.lease_s),
                                                   name="runtime lease")
            return lease.id

    async def _keep_lease(self, lease_id: str, lease_s: float) -> None:
        """Heartbeat the lease three times per ``lease_s`` until it is refused."""
        interval = max(0.2, lease_s / 3)
        while True:
            await asyncio.sleep(interval)
            try:
                await self.client.heartbeat_lease(lease_id)
            except ApiError as exc:
                if exc.status in (404, 409):
                    log.warning("runtime lease lost; the next job takes a new one",
                                extra={"lease_id": lease_id, "code": exc.code})
                    self._note("lease_lost", "", None, lease_id=lease_id)
                    if self.lease_id == lease_id:
                        self.lease_id = None
                    return
                log.warning("lease heartbeat failed", extra={"lease_id": lease_id,
                                                             "code": exc.code})
            except httpx.TransportError as exc:
                log.warning("lease heartbeat failed", extra={"lease_id": lease_id,
                                                             "error": type(exc).__name__})

    # ----- background jobs -----

    async def _report_start(self, job: BackgroundJob) -> None:
        """A background command started: post it as an event that wakes nothing, so the
        thread's state says it works in the background until the exit is reported (or the
        runtime's lease lapses)."""
        body = f"Background job {job.job_id} started: {job.command}"
        report: dict[str, Any] = {"job_id": job.job_id, "phase": "started",
                                  "command": job.command[:META_COMMAND_CHARS]}
        lease_id = await self._lease()
        if lease_id is not None:
            report["lease_id"] = lease_id
        self._note("background_start", job.thread_id, None, job_id=job.job_id,
                   lease_id=lease_id)
        try:
            try:
                await self.client.post_event(job.thread_id, body, {"backgroundJob": report})
            except ApiError as exc:
                if lease_id is None or exc.status not in (404, 409) or exc.code == "invalid":
                    raise
                # the lease lapsed (or is gone) since its last heartbeat: a new one, once
                if self.lease_id == lease_id:
                    self.lease_id = None
                report.pop("lease_id")
                if (fresh := await self._lease()) is not None:
                    report["lease_id"] = fresh
                await self.client.post_event(job.thread_id, body, {"backgroundJob": report})
        except (ApiError, httpx.TransportError) as exc:
            log.error("could not report a background job's start",
                      extra={"thread_id": job.thread_id, "error": str(exc)[:200]})

    async def _report_exit(self, job: BackgroundJob) -> None:
        """A background command exited: post it as an event (it wakes an idle thread)."""
        body = (f'<background_job_done job_id="{job.job_id}" exit_code="{job.exit_code}">\n'
                f"{job.tail()}</background_job_done>")
        meta = {"backgroundJob": {"job_id": job.job_id, "phase": "finished",
                                  "command": job.command[:META_COMMAND_CHARS],
                                  "exit_code": job.exit_code,
                                  "tail": job.tail(), **({"stopped": True} if job.stopped
                                                         else {})}}
        self._note("background_exit", job.thread_id, None, job_id=job.job_id,
                   exit_code=job.exit_code)
        try:
            await self.client.post_event(job.thread_id, body, meta)
        except (ApiError, httpx.TransportError) as exc:
            log.error("could not report a background job's exit",
                      extra={"thread_id": job.thread_id, "error": str(exc)[:200]})

    async def aclose(self) -> None:
        await self.tools.aclose()  # reports the jobs still running as ended
        if self._lease_beat is not None:
            self._lease_beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._lease_beat
            self._lease_beat = None
        await self.model.aclose()
