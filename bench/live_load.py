"""The load process for items 2 and 3 (``python -m bench.live_load``, a JSON job on stdin).

``frames``: connect N WebSocket clients (each subscribes from the beginning and waits for
``synced``), read the server's RSS, then answer cards over HTTP at a steady rate; for each
answer, the time from its HTTP response to the ``record.upsert`` that shows the card answered
(the tool row's ``display.states``) at the owner's socket. One process, one clock.

``claim``: an agent runtime long-polls ``POST /v1/agent/turns/claim``; cards on idle threads are
answered one at a time; for each, the time from the answer's HTTP response (and from its
request) to the claim's return with that thread's turn, which the runtime then finishes.

``sockets``: one client process of ``python -m bench.sockets`` (issue 33, item 3), driven by
JSON lines on stdin; see ``sockets`` below.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import sys
import time
from typing import Any

import psutil
from websockets.asyncio.client import ClientConnection, connect

from bench.http_load import HttpConnection

CONNECT_AT_ONCE = 50
FRAME_GRACE_S = 5.0


def _rss_mb(pid: int) -> float:
    proc = psutil.Process(pid)
    return round(float(proc.memory_info().rss) / 1e6, 1)


async def _client(uri: str, token: str, on_frame: Any, ready: asyncio.Event,
                  stop: asyncio.Event, errors: list[str]) -> None:
    try:
        async with connect(uri, additional_headers={"Authorization": f"Bearer {token}"},
                           max_size=2**24, ping_interval=None) as ws:
            await ws.send(json.dumps({"op": "subscribe", "cursor": None, "threads": None}))
            reader = asyncio.create_task(_read(ws, on_frame, ready))
            await stop.wait()
            reader.cancel()
    except Exception as exc:  # noted, and the run reports it
        errors.append(f"{type(exc).__name__}: {exc}")
        ready.set()


async def _read(ws: ClientConnection, on_frame: Any, ready: asyncio.Event) -> None:
    async for text in ws:
        now = time.perf_counter()
        frame = json.loads(text)
        if frame.get("type") == "synced":
            ready.set()
        elif frame.get("type") == "record.upsert":
            on_frame(frame, now)


def answered_components(frame: dict[str, Any]) -> list[str]:
    """The card ids a ``record.upsert`` shows answered (the tool row's ``display.states``)."""
    if frame.get("table") != "messages":
        return []
    states = ((frame.get("record") or {}).get("display") or {}).get("states") or {}
    return [cid for cid, state in states.items() if state.get("status") == "answered"]


async def frames(job: dict[str, Any]) -> dict[str, Any]:
    uri = f"ws://{job['host']}:{job['port']}/v1/ws"
    pid = job["server_pid"]
    rss_before = _rss_mb(pid)
    answered_at: dict[str, float] = {}  # component id → the answer's HTTP response
    framed_at: dict[str, float] = {}  # component id → the frame showing it answered
    stop = asyncio.Event()
    all_framed = asyncio.Event()
    errors: list[str] = []

    def on_frame(frame: dict[str, Any], now: float) -> None:
        for cid in answered_components(frame):
            if cid not in framed_at:
                framed_at[cid] = now
                if len(framed_at) >= len(job["answers"]):
                    all_framed.set()

    readies, tasks = [], []
    t0 = time.perf_counter()
    for i in range(0, len(job["tokens"]), CONNECT_AT_ONCE):
        batch = []
        for token in job["tokens"][i:i + CONNECT_AT_ONCE]:
            ready = asyncio.Event()
            readies.append(ready)
            batch.append(ready)
            tasks.append(asyncio.create_task(_client(uri, token, on_frame, ready, stop, errors)))
        await asyncio.gather(*(r.wait() for r in batch))
    connect_s = time.perf_counter() - t0
    rss_connected = _rss_mb(pid)

    http = [HttpConnection(job["host"], job["port"], "") for _ in range(8)]
    interval = 1.0 / job["rate"]
    statuses: list[int] = []

    async def answer(i: int, item: dict[str, Any]) -> None:
        conn = http[i % len(http)]
        async with locks[i % len(http)]:
            status, _ = await conn.post(f"/v1/components/{item['component_id']}/answer",
                                        {"selected": ["keep"], "text": None},
                                        token=item["token"])
        answered_at[item["component_id"]] = time.perf_counter()
        statuses.append(status)

    locks = [asyncio.Lock() for _ in http]
    start = time.perf_counter()
    answers = []
    for i, item in enumerate(job["answers"]):
        delay = start + i * interval - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        answers.append(asyncio.create_task(answer(i, item)))
    await asyncio.gather(*answers)
    with contextlib.suppress(TimeoutError):  # a missing frame is counted, not waited for
        await asyncio.wait_for(all_framed.wait(), FRAME_GRACE_S)
    rss_after = _rss_mb(pid)
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    for conn in http:
        conn.close()
    latencies = [framed_at[c] - t for c, t in answered_at.items() if c in framed_at]
    return {"clients": len(job["tokens"]), "connect_s": round(connect_s, 2),
            "answers": len(answered_at), "non_200": sum(1 for s in statuses if s != 200),
            "missing_frames": len(answered_at) - len(latencies), "latencies_s": latencies,
            "rate_per_s": job["rate"], "server_rss_mb_before": rss_before,
            "server_rss_mb": rss_connected, "server_rss_mb_after": rss_after,
            "client_errors": errors[:5], "client_error_count": len(errors)}


async def claim(job: dict[str, Any]) -> dict[str, Any]:
    host, port = job["host"], job["port"]
    runtime = HttpConnection(host, port, job["agent_token"])
    user = HttpConnection(host, port, job["user_token"])
    returned: dict[str, float] = {}
    arrived: dict[str, asyncio.Event] = {}
    stop = asyncio.Event()
    errors: list[str] = []

    async def run_runtime() -> None:
        while not stop.is_set():
            status, body = await runtime.post("/v1/agent/turns/claim",
                                              {"wait_s": 5, "runtime_id": "bench"})
            now = time.perf_counter()
            if status == 204:
                continue
            if status != 200:
                errors.append(f"claim: {status} {body}")
                return
            thread = body["turn"]["thread_id"]
            returned.setdefault(thread, now)
            arrived.setdefault(thread, asyncio.Event()).set()
            status, body = await runtime.post(f"/v1/agent/turns/{body['turn']['id']}/finish")
            if status != 200:
                errors.append(f"finish: {status} {body}")

    task = asyncio.create_task(run_runtime())
    await asyncio.sleep(0.5)  # the first claim is parked before the first answer
    sent_at: dict[str, float] = {}
    answered_at: dict[str, float] = {}
    for item in job["answers"]:
        thread = item["thread_id"]
        arrived.setdefault(thread, asyncio.Event())
        await asyncio.sleep(job["gap_s"])  # let the runtime park its next claim
        sent_at[thread] = time.perf_counter()
        status, body = await user.post(f"/v1/components/{item['component_id']}/answer",
                                        {"selected": ["keep"], "text": None})
        answered_at[thread] = time.perf_counter()
        if status != 200:
            errors.append(f"answer: {status} {body}")
            continue
        try:
            await asyncio.wait_for(arrived[thread].wait(), 10)
        except TimeoutError:
            errors.append(f"no claim returned thread {thread} within 10 s")
    stop.set()
    task.cancel()
    runtime.close()
    user.close()
    return {"answers": len(answered_at), "errors": errors[:5], "error_count": len(errors),
            "from_response_s": [returned[t] - answered_at[t] for t in answered_at
                                if t in returned],
            "from_request_s": [returned[t] - sent_at[t] for t in sent_at if t in returned]}


class Socket:
    """One logical client of ``sockets``: it subscribes from the beginning, holds the latest
    rev of each record it was sent, and when dropped reconnects and resumes from the last
    cursor it received (as the WebUI does). A frame whose rev it already holds for that record
    is a duplicate; a lower rev is stale (counted apart)."""

    def __init__(self, sid: int, user: str, token: str, uri: str) -> None:
        self.sid, self.user, self.token, self.uri = sid, user, token, uri
        self.cursor: str | None = None
        self.revs: dict[str, int] = {}  # "table:id" -> the highest rev received
        self.answered: dict[str, float] = {}  # card id -> first frame showing it answered
        self.duplicates = self.stale = self.frames = self.connects = 0
        self.errors: list[str] = []
        self.synced = asyncio.Event()
        self.synced_at = 0.0
        self.dropped_at = 0.0
        self.ws: ClientConnection | None = None
        self._redo = False
        self.stopping = False

    async def serve(self) -> None:
        """Connect, subscribe from the cursor held, read until closed; again when dropped."""
        while True:
            self._redo = False
            try:
                async with connect(self.uri, max_size=2**24, ping_interval=None,
                                   compression=None, open_timeout=60,
                                   additional_headers={"Authorization": f"Bearer {self.token}"},
                                   ) as ws:
                    self.ws = ws
                    self.connects += 1
                    await ws.send(json.dumps({"op": "subscribe", "cursor": self.cursor,
                                              "threads": None}))
                    async for text in ws:
                        self.on_text(text, time.monotonic())
                if not (self._redo or self.stopping):
                    self.errors.append(f"closed by the server: {ws.close_code} {ws.close_reason}")
            except Exception as exc:  # counted; a dropped socket's own abort is not an error
                if not (self._redo or self.stopping):
                    self.errors.append(f"{type(exc).__name__}: {exc}")
            self.ws = None
            if not self._redo:
                self.synced.set()  # nobody waits forever for a socket that is gone
                return

    def on_text(self, text: str, now: float) -> None:
        frame = json.loads(text)
        kind = frame.get("type")
        if kind == "record.upsert":
            self.frames += 1
            key = f"{frame['table']}:{frame['record']['id']}"
            held = self.revs.get(key)
            if held is not None and frame["rev"] <= held:
                if frame["rev"] == held:
                    self.duplicates += 1
                else:
                    self.stale += 1
            else:
                self.revs[key] = frame["rev"]
            self.cursor = frame["cursor"]
            for cid in answered_components(frame):
                self.answered.setdefault(cid, now)
        elif kind == "synced":
            self.cursor = frame["cursor"]
            self.synced_at = now
            self.synced.set()
        elif kind in ("resync", "error"):
            self.errors.append(text[:200])

    def drop(self) -> None:
        """Cut the TCP connection (no closing handshake, like a phone losing its network);
        ``serve`` reconnects at once with the last cursor."""
        self._redo = True
        self.synced = asyncio.Event()
        self.dropped_at = time.monotonic()
        if self.ws is not None:
            self.ws.transport.abort()

    def lost(self, expected: dict[str, int]) -> list[str]:
        """Records of the user whose latest rev this socket does not hold."""
        return [key for key, rev in expected.items() if self.revs.get(key, -1) < rev]


def _emit(event: dict[str, Any]) -> None:
    """One JSON line to the orchestrator, written whole: a short write (stdout left
    non-blocking, a signal) continues where it stopped instead of leaving half a line."""
    _write_all(sys.stdout.fileno(), (json.dumps(event) + "\n").encode())


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            select.select([], [fd], [], 1.0)


def _finished(result: dict[str, Any], path: str | None) -> dict[str, Any]:
    """The per-socket results go in a file beside the client's log (hundreds of KB at 1,000
    sockets) and the line says where: a pipe then carries only short lines."""
    if path is None:
        return result
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, path)
    return {"event": "finished", "result_path": path, "bytes": os.path.getsize(path)}


async def _command() -> dict[str, Any]:
    line = await asyncio.to_thread(sys.stdin.readline)
    if not line:
        return {"cmd": "finish", "expected": {}}  # the orchestrator went away
    command: dict[str, Any] = json.loads(line)
    return command


async def _synced(socks: list[Socket], within_s: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.gather(*(s.synced.wait() for s in socks)), within_s)


async def sockets(job: dict[str, Any]) -> dict[str, Any]:
    """One client process of ``python -m bench.sockets``: JSON lines in (commands), JSON lines
    out (events). It opens its share of the sockets (``CONNECT_AT_ONCE`` at a time, each
    waiting for ``synced``) and says ``ready``; ``drop`` cuts the named sockets at once and says
    ``resynced`` when each has reconnected and caught up from its cursor; ``finish`` compares
    every socket's records with the database's latest revs and returns the per-socket results."""
    socks = [Socket(s["sid"], s["user"], s["token"], f"ws://{job['host']}:{s['port']}/v1/ws")
             for s in job["sockets"]]
    by_sid = {s.sid: s for s in socks}
    tasks: list[asyncio.Task[None]] = []
    t0 = time.monotonic()
    for i in range(0, len(socks), job.get("connect_at_once", CONNECT_AT_ONCE)):
        batch = socks[i:i + job.get("connect_at_once", CONNECT_AT_ONCE)]
        tasks += [asyncio.create_task(s.serve()) for s in batch]
        await _synced(batch, 120)
    _emit({"event": "ready", "connect_s": round(time.monotonic() - t0, 2),
           "synced": sum(1 for s in socks if s.synced_at), "rss_mb": _rss_mb(os.getpid()),
           "errors": [e for s in socks for e in s.errors][:5],
           "error_count": sum(len(s.errors) for s in socks)})
    while True:
        command = await _command()
        if command["cmd"] == "drop":
            chosen = [by_sid[sid] for sid in command["sids"]]
            for s in chosen:
                s.drop()
            await _synced(chosen, command.get("timeout_s", 120))
            _emit({"event": "resynced",
                   "sockets": [{"sid": s.sid, "dropped_at": s.dropped_at,
                                "synced_at": s.synced_at if s.synced.is_set() and s.ws
                                else None} for s in chosen]})
        elif command["cmd"] == "finish":
            expected: dict[str, dict[str, int]] = command["expected"]
            result = {"event": "finished", "rss_mb": _rss_mb(os.getpid()), "sockets": [
                {"sid": s.sid, "answered": s.answered, "frames": s.frames,
                 "duplicates": s.duplicates, "stale": s.stale, "connects": s.connects,
                 "errors": s.errors[:3], "error_count": len(s.errors),
                 "lost": s.lost(expected.get(s.user, {}))[:3],
                 "lost_count": len(s.lost(expected.get(s.user, {})))} for s in socks]}
            for s in socks:
                s.stopping = True
                if s.ws is not None:
                    s.ws.transport.abort()
            await asyncio.gather(*tasks, return_exceptions=True)
            return result


def main() -> None:
    job = json.loads(sys.stdin.readline())  # one line; ``sockets`` reads its commands after it
    work = (frames(job) if job["kind"] == "frames" else claim(job) if job["kind"] == "claim"
            else sockets(job))
    try:
        import uvloop

        result = uvloop.run(work)
    except ImportError:
        result = asyncio.run(work)
    if job["kind"] == "sockets":
        _emit(_finished(result, job.get("result_path")))
    else:
        json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
