"""``maxclaw bridge``: wake an agent host we do not run when Max answers.

Hosts such as Claude Code or Codex talk to MaxClaw over MCP while their turn runs; once it has
ended, nothing starts the next one. The bridge does: it long-polls ``POST
/v1/agent/turns/claim`` for its threads, and when a turn is queued it runs the thread's host
command with the delivered input as the prompt, e.g.

    maxclaw bridge --thread T --session S -- claude -p --resume {session} {prompt}

Placeholders (in any argument): ``{prompt}`` (the input that woke the thread: Max's answers,
his messages, events), ``{session}``, ``{thread}``, ``{turn}``. The bridge keeps the turn's
lease while the command runs, writes nothing of the conversation itself (the host does, over
MCP), and finishes the turn when the command exits.

Failures: a command that exits non-zero, cannot be started or outlives ``timeout_s`` (killed)
ends the turn with an event saying so; the event is new input, so ``finish`` queues the turn
again and the host gets the same input once more. A second failure on that input writes one
assistant row for Max ("the host failed twice; the input above waits for you") and queues
nothing: the bridge never retries forever.

No turn runs twice: before it starts a command, the bridge records in its journal (one small
JSON file per thread in the state directory) which input it runs and the command's process
id. The command runs in a session of its own, so a bridge killed with ``kill -9`` leaves it
running; the turn's lease lapses and the service queues the turn again. The restarted bridge
claims it, recognises the same input in its journal, and instead of starting the host again
waits for the recorded process to end (keeping the new lease) and finishes the turn. A bridge
whose lease is lost while its command runs (409 on a heartbeat) lets the command end and
writes nothing more: the turn is someone else's now.

Max's Stop (``POST /v1/threads/{id}/turn/stop``) is the one 409 that ends the command: the
heartbeat after it answers ``409 turn_stopped``, and the bridge stops the host's process group
(SIGTERM, SIGKILL after a grace period), records the input as run (a stopped turn is never
run again; what arrives later starts a new turn) and writes nothing more. The host stops
within one heartbeat interval (a third of the turn's lease).

A token the service refuses (revoked, expired: 401/403) stops the bridge with exit status 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import signal
import socket
import tomllib
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx

from maxclaw.client.http import AgentClient, ApiError
from maxclaw.wire.models import ChatMessage, Claim

log = logging.getLogger("maxclaw.bridge")
FAILED_MARK = "maxclaw-bridge: the host command failed"
GAVE_UP_MARK = "maxclaw-bridge: the host command failed twice"
DEFAULT_TIMEOUT_S = 3600.0
KILL_GRACE_S = 5.0
POLL_PID_S = 0.2
STOPPED_CODE = "turn_stopped"  # the 409 code of a turn Max stopped (errors.TurnStopped)
PLACEHOLDER = re.compile(r"\{(prompt|session|thread|turn)\}")


class BridgeStop(Exception):
    """The bridge cannot go on (a refused token, a bad configuration): one line, exit 1."""


@dataclass(frozen=True)
class Target:
    """One thread the bridge runs a host for."""

    thread_id: str
    command: tuple[str, ...]
    session: str = ""
    timeout_s: float = DEFAULT_TIMEOUT_S


def load_config(path: Path) -> list[Target]:
    """Targets from a TOML file: ``[[thread]]`` tables with ``id``, ``command`` (a list of
    arguments), and optional ``session`` and ``timeout_s``."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise BridgeStop(f"cannot read the bridge configuration {path}: {exc}") from None
    tables = data.get("thread", [])
    if not isinstance(tables, list):
        raise BridgeStop(f"{path}: write each thread as a [[thread]] table")
    targets = []
    for i, entry in enumerate(tables):
        command = entry.get("command") if isinstance(entry, dict) else None
        if not isinstance(command, list) or not isinstance(entry.get("id"), str) or not command \
                or not all(isinstance(a, str) for a in command):
            raise BridgeStop(f"{path}: thread #{i + 1} needs id = \"<thread id>\" and command = "
                             "[\"program\", \"arg\", …]")
        try:
            timeout_s = float(entry.get("timeout_s", DEFAULT_TIMEOUT_S))
        except (TypeError, ValueError):
            raise BridgeStop(f"{path}: thread #{i + 1}: timeout_s is a number of seconds") \
                from None
        targets.append(Target(entry["id"], tuple(command), str(entry.get("session", "")),
                              timeout_s))
    if not targets:
        raise BridgeStop(f"{path}: no [[thread]] table")
    return targets


# ----- what a turn hands the host -----

def prompt_of(messages: list[ChatMessage]) -> str:
    """The prompt: the input's texts, without the bridge's own failure notes."""
    texts = [m.content or "" for m in messages if FAILED_MARK not in (m.content or "")]
    return "\n\n".join(t for t in texts if t)


def failed_before(messages: list[ChatMessage]) -> bool:
    return any(FAILED_MARK in (m.content or "") for m in messages)


def command_for(target: Target, prompt: str, turn_id: int) -> list[str]:
    """The host command with its placeholders filled in one pass, so text that came in
    (a prompt holding "{session}" or braces) is never substituted again."""
    values = {"prompt": prompt, "session": target.session, "thread": target.thread_id,
              "turn": str(turn_id)}
    return [PLACEHOLDER.sub(lambda m: values[m.group(1)], arg) for arg in target.command]


# ----- the journal -----

@dataclass
class Entry:
    """The last input the bridge took for a thread, and what became of it.

    ``prompt`` is kept only while it may still be needed: from the claim until the host has
    run it, and after a failure until the one retry (the service delivers input once, so a
    claim after a restart or a failure does not carry it again)."""

    turn_id: int
    prompt: str
    pid: int | None = None
    pid_started: str | None = None  # /proc start time, so a reused pid is not taken for ours
    exit_code: int | None = None
    done: bool = False


@dataclass
class Journal:
    directory: Path

    def _path(self, thread_id: str) -> Path:
        return self.directory / f"{thread_id}.json"

    def load(self, thread_id: str) -> Entry | None:
        try:
            data = json.loads(self._path(thread_id).read_text())
            return Entry(**data)
        except (OSError, ValueError, TypeError):
            return None

    def save(self, thread_id: str, entry: Entry) -> None:
        """Written whole and renamed into place, so a crash leaves the old entry or the new."""
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self._path(thread_id).with_suffix(".tmp")
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            json.dump(entry.__dict__, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._path(thread_id))


def process_start(pid: int) -> str | None:
    """The process's start time (field 22 of /proc/PID/stat), or None if it is gone or a
    zombie (ended, not yet reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):
        return None
    return fields[19]


def still_running(entry: Entry) -> bool:
    return entry.pid is not None and not entry.done and \
        process_start(entry.pid) == entry.pid_started


# ----- the bridge -----

@dataclass
class TurnOutcome:
    turn_id: int
    thread_id: str
    ran: bool = False
    exit_code: int | None = None
    lost: bool = False
    requeued: bool | None = None
    stopped: bool = False  # Max stopped the turn: the host was stopped, nothing more written


@dataclass
class Bridge:
    client: AgentClient
    targets: list[Target]
    journal: Journal
    runtime_id: str = field(default_factory=lambda: (
        f"bridge-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"))
    refused: str | None = None

    def __post_init__(self) -> None:
        self.by_thread = {t.thread_id: t for t in self.targets}
        self.running: set[asyncio.Task[TurnOutcome]] = set()
        self.hosts: dict[int, asyncio.subprocess.Process] = {}  # turn id → its running host

    async def run_forever(self, stop: asyncio.Event, wait_s: float = 25) -> None:
        """Claim and run turns until ``stop`` is set; raises ``BridgeStop`` on a refused token
        (after the commands already running have ended)."""
        failures = 0
        while not stop.is_set() and self.refused is None:
            try:
                claim = await self.client.claim_unless_stopped(
                    stop, wait_s, self.runtime_id, list(self.by_thread))
                # (the journal keeps a turn claimed as we stopped from running twice)
                failures = 0
            except ApiError as exc:
                if exc.status in (401, 403):
                    self.refused = exc.message
                    break
                failures += 1
                log.warning("claim failed", extra={"code": exc.code, "attempts": failures})
                claim = None
            except httpx.TransportError as exc:
                failures += 1
                log.warning("MaxClaw unreachable", extra={"error": type(exc).__name__,
                                                          "attempts": failures})
                claim = None
            if claim is not None:
                task = asyncio.create_task(self.run_turn(claim))
                self.running.add(task)
                task.add_done_callback(self.running.discard)
            if failures:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), min(30.0, 0.5 * 2**failures))
        if self.running:
            await asyncio.gather(*self.running, return_exceptions=True)
        if self.refused is not None:
            raise BridgeStop(f"MaxClaw refused the agent token ({self.refused}); create a new "
                             "one (maxclaw token create --role agent) and restart the bridge")

    async def run_turn(self, claim: Claim) -> TurnOutcome:
        """Run one claimed turn's host command (unless the journal says it ran) and finish."""
        turn_id, thread_id = claim.turn.id, claim.turn.thread_id
        outcome = TurnOutcome(turn_id, thread_id)
        target = self.by_thread.get(thread_id)
        lease_s = max(1.0, (claim.turn.lease_until - datetime.now(UTC)).total_seconds())
        if target is None:  # only with an old server that ignores thread_ids
            log.error("claimed a turn of a thread this bridge does not serve; it will lapse",
                      extra={"turn_id": turn_id, "thread_id": thread_id})
            outcome.lost = True
            return outcome
        work = asyncio.create_task(self._work(claim, target, outcome))
        beat = asyncio.create_task(self._keep_lease(turn_id, lease_s, outcome))
        try:
            await work
        finally:
            beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beat
        if outcome.stopped:
            self._forget_prompt(thread_id)  # never run again, not even as the one retry
            log.info("Max stopped the turn; the host was stopped and nothing more written",
                     extra={"turn_id": turn_id, "thread_id": thread_id,
                            "exit_code": outcome.exit_code})
            return outcome
        if outcome.lost:
            log.warning("turn lost (its lease lapsed); the bridge wrote nothing more",
                        extra={"turn_id": turn_id, "thread_id": thread_id})
            return outcome
        await self._end(claim, target, outcome)
        return outcome

    async def _work(self, claim: Claim, target: Target, outcome: TurnOutcome) -> None:
        thread_id, turn_id = target.thread_id, claim.turn.id
        seen = self.journal.load(thread_id)
        carried = ""  # input an earlier claim took that the host is still owed
        if seen is not None and not seen.done:
            if seen.pid is None:  # taken, then the bridge stopped before starting the host
                carried = seen.prompt
            else:  # a restart, or a lapse, while the host ran: it is not started again
                if still_running(seen):
                    log.info("the host is still running this input from before; waiting",
                             extra={"turn_id": turn_id, "thread_id": thread_id,
                                    "pid": seen.pid})
                    await self._wait_for_pid(seen)
                seen.done, seen.prompt = True, ""
                self.journal.save(thread_id, seen)
        retry = failed_before(claim.input)
        if retry and seen is not None and seen.done and seen.exit_code not in (None, 0):
            carried = seen.prompt
        prompt = "\n\n".join(p for p in (carried, prompt_of(claim.input)) if p)
        if not prompt:
            log.info("nothing new for the host; turn finished without running it",
                     extra={"turn_id": turn_id, "thread_id": thread_id})
            return
        if outcome.stopped:  # Max stopped the turn before its host started
            return
        outcome.ran = True
        outcome.exit_code = await self._run_command(target, prompt, turn_id)

    async def _run_command(self, target: Target, prompt: str, turn_id: int) -> int:
        argv = command_for(target, prompt, turn_id)
        entry = Entry(turn_id, prompt)
        self.journal.save(target.thread_id, entry)  # before the start: never run twice
        try:
            proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.DEVNULL,
                                                        start_new_session=True)
        except OSError as exc:
            log.error("the host command cannot be started",
                      extra={"thread_id": target.thread_id, "turn_id": turn_id,
                             "error": f"{type(exc).__name__}: {exc}"[:300]})
            self._ended(target.thread_id, entry, 127)
            return 127
        entry.pid, entry.pid_started = proc.pid, process_start(proc.pid)
        self.journal.save(target.thread_id, entry)
        log.info("host started", extra={"thread_id": target.thread_id, "turn_id": turn_id,
                                        "pid": proc.pid})
        self.hosts[turn_id] = proc
        try:
            code = await asyncio.wait_for(proc.wait(), target.timeout_s)
        except TimeoutError:
            log.error("the host command ran past its timeout; killed it",
                      extra={"thread_id": target.thread_id, "turn_id": turn_id,
                             "timeout_s": target.timeout_s})
            code = await _kill_group(proc)
        finally:
            self.hosts.pop(turn_id, None)
        self._ended(target.thread_id, entry, code)
        return code

    def _ended(self, thread_id: str, entry: Entry, code: int) -> None:
        """Recorded as run; the prompt is kept only for the one retry after a failure."""
        entry.exit_code, entry.done = code, True
        if code == 0:
            entry.prompt = ""
        self.journal.save(thread_id, entry)

    async def _wait_for_pid(self, entry: Entry) -> None:
        # not our child any more (the bridge that started it died): no exit to await, so poll
        while still_running(entry):  # noqa: ASYNC110
            await asyncio.sleep(POLL_PID_S)

    async def _keep_lease(self, turn_id: int, lease_s: float, outcome: TurnOutcome) -> None:
        interval = max(0.2, lease_s / 3)
        while True:
            await asyncio.sleep(interval)
            try:
                await self.client.heartbeat(turn_id)
            except ApiError as exc:
                if exc.code == STOPPED_CODE:
                    outcome.stopped = outcome.lost = True
                    await self._stop_host(turn_id)
                    return
                if exc.status in (404, 409):
                    outcome.lost = True
                    return
                if exc.status in (401, 403):
                    self.refused = exc.message
                    outcome.lost = True  # nothing more can be written with this token
                    return
                log.warning("heartbeat failed", extra={"turn_id": turn_id, "code": exc.code})
            except httpx.TransportError as exc:
                log.warning("heartbeat failed", extra={"turn_id": turn_id,
                                                       "error": type(exc).__name__})

    async def _stop_host(self, turn_id: int) -> None:
        """Max stopped the turn: stop its host (the command's whole process group)."""
        proc = self.hosts.get(turn_id)
        if proc is None:  # not started yet, or already ended: nothing runs
            return
        log.info("Max stopped the turn; stopping the host", extra={"turn_id": turn_id,
                                                                  "pid": proc.pid})
        await _kill_group(proc)

    async def _end(self, claim: Claim, target: Target, outcome: TurnOutcome) -> None:
        """Finish the turn; after a failure, first write what lets Max (or a retry) see it."""
        turn_id, thread_id = claim.turn.id, target.thread_id
        try:
            if outcome.exit_code not in (None, 0):
                await self._report_failure(claim, outcome.exit_code)
            finished = await self.client.finish(turn_id)
            outcome.requeued = finished.requeued
        except ApiError as exc:
            if exc.status in (401, 403):
                self.refused = exc.message
            outcome.lost = True
            log.warning("could not finish the turn", extra={"turn_id": turn_id,
                                                            "code": exc.code})
            return
        except httpx.TransportError as exc:
            outcome.lost = True  # the lease lapses and the journal keeps it from running again
            log.warning("could not finish the turn", extra={"turn_id": turn_id,
                                                            "error": type(exc).__name__})
            return
        log.info("turn finished", extra={"turn_id": turn_id, "thread_id": thread_id,
                                         "exit_code": outcome.exit_code,
                                         "requeued": finished.requeued})

    def _forget_prompt(self, thread_id: str) -> None:
        entry = self.journal.load(thread_id)
        if entry is not None and entry.prompt:
            entry.prompt = ""
            self.journal.save(thread_id, entry)

    async def _report_failure(self, claim: Claim, code: int | None) -> None:
        thread_id, turn_id = claim.turn.thread_id, claim.turn.id
        if failed_before(claim.input):
            log.error("the host command failed twice on the same input; left for Max",
                      extra={"turn_id": turn_id, "thread_id": thread_id, "exit_code": code})
            self._forget_prompt(thread_id)
            await self.client.post_assistant(
                thread_id, f"{GAVE_UP_MARK} on the input above (exit status {code}). It was "
                "not run again: answer here or start the agent by hand.", None, turn_id)
            return
        log.warning("the host command failed; its input is queued once more",
                    extra={"turn_id": turn_id, "thread_id": thread_id, "exit_code": code})
        # an event is input: finish sees it undelivered and queues the turn again
        await self.client.post_event(
            thread_id, f"{FAILED_MARK} (exit status {code}); running it once more.",
            {"bridgeFailure": {"exit_code": code, "turn_id": turn_id}})


async def _kill_group(proc: asyncio.subprocess.Process) -> int:
    """SIGTERM to the command's process group, SIGKILL after a grace period; its status."""
    for sig, grace in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, None)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            return await asyncio.wait_for(proc.wait(), grace)
        except TimeoutError:
            continue
    return await proc.wait()


async def check_targets(client: AgentClient, url: str, targets: list[Target]) -> None:
    """Before waiting: the server answers, the token is an agent token, each thread is one
    it may serve (else a bridge would wait forever for turns it can never claim)."""
    for target in targets:
        path = f"/v1/agent/threads/{target.thread_id}/components"
        try:
            await client._request("GET", path, params={"limit": 1})
        except ApiError as exc:
            if exc.status == 404:
                raise BridgeStop(f"{url} knows no thread {target.thread_id} for this token") \
                    from None
            raise BridgeStop(f"{url} refused the bridge ({exc.status} {exc.code}: "
                             f"{exc.message})") from None
        except httpx.TransportError as exc:
            raise BridgeStop(f"cannot reach MaxClaw at {url} ({type(exc).__name__})") from None


def run_bridge(url: str, token: str, targets: list[Target], state_dir: Path,
               wait_s: float) -> None:
    """Run until SIGINT/SIGTERM; raises ``BridgeStop`` when the token is refused."""

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop.set)
        async with AgentClient(url, token, retries=3) as client:
            await check_targets(client, url, targets)
            bridge = Bridge(client, targets, Journal(state_dir))
            log.info("bridge started", extra={"count": len(targets)})
            await bridge.run_forever(stop, wait_s)

    asyncio.run(main())


def default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "maxclaw" / "bridge"
