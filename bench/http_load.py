"""(c) The HTTP load process: its own interpreter and event loop, N keep-alive connections.

Run by the suite as ``python -m bench.http_load`` with a JSON job on stdin; prints the samples
as JSON on stdout. A round trip is three requests (post the assistant row, ``execute``, answer),
or two with ``execute_in_post`` (the post carries ``"execute": true``). The client is a minimal
HTTP/1.1 writer/reader on asyncio streams, so the load generator spends as little of the
machine's two cores as it can (httpx costs several times more per request), and what is
measured is the server.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from bench.loop import RoundTrip, closed_loop


class HttpConnection:
    """One keep-alive HTTP/1.1 connection that POSTs JSON and reads JSON back."""

    def __init__(self, host: str, port: int, token: str) -> None:
        self.host, self.port = host, port
        self.auth = f"Authorization: Bearer {token}\r\n"
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: Any = None, token: str | None = None,
                   ) -> tuple[int, Any]:
        """POST ``body`` as JSON (with another bearer ``token`` if given); (status, JSON)."""
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        data = json.dumps(body).encode() if body is not None else b""
        auth = f"Authorization: Bearer {token}\r\n" if token else self.auth
        head = (f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\n{auth}"
                f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n")
        self.writer.write(head.encode() + data)
        status_line = await self.reader.readline()
        if not status_line:
            raise ConnectionError("the server closed the connection")
        status = int(status_line.split()[1])
        length = 0
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            if name.lower() == "content-length":
                length = int(value)
            elif name.lower() == "transfer-encoding":
                raise RuntimeError("chunked responses are not expected from these endpoints")
        payload = await self.reader.readexactly(length) if length else b""
        return status, json.loads(payload) if payload else None

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def _client(job: dict[str, Any], spec: dict[str, Any], tag: str) -> tuple[RoundTrip, list[int]]:
    host, port = job["host"], job["port"]
    agent = HttpConnection(host, port, spec["agent_token"])
    user = HttpConnection(host, port, spec["user_token"])
    threads: list[str] = spec["threads"]
    state = [0, 0]  # next thread, reused threads

    async def round_trip() -> tuple[float, float]:
        i = state[0]
        state[0] += 1
        if i >= len(threads):
            state[1] += 1
        thread = threads[i % len(threads)]
        call_id = f"{tag}_{i}"
        t0 = time.perf_counter()
        row: dict[str, Any] = {"role": "assistant", "content": None,
               "tool_calls": [{"id": call_id, "type": "function", "function": {
                   "name": "ask_user_question", "arguments": json.dumps(job["card"])}}]}
        if job.get("execute_in_post"):
            row["execute"] = True  # the service runs its own tool in the post's transaction
        status, body = await agent.post(f"/v1/agent/threads/{thread}/messages", row)
        if status != 201:
            raise RuntimeError(f"post assistant row: {status} {body}")
        if job.get("execute_in_post"):
            results = body.get("results") or [{}]
            if results[0].get("status") != 200:
                raise RuntimeError(f"post with execute: {body}")
        else:
            status, body = await agent.post(
                f"/v1/agent/threads/{thread}/tool-calls/{call_id}/execute")
            if status != 200:
                raise RuntimeError(f"execute: {status} {body}")
        t1 = time.perf_counter()
        status, body = await user.post(f"/v1/components/{call_id}:q1/answer",
                                       {"selected": ["keep"], "text": None})
        if status != 200:
            raise RuntimeError(f"answer: {status} {body}")
        t2 = time.perf_counter()
        return t2 - t0, t2 - t1

    return round_trip, state


async def run(job: dict[str, Any]) -> dict[str, Any]:
    clients = [_client(job, spec, f"{job['tag']}c{n}")
               for n, spec in enumerate(job["clients"])]
    cpu0 = time.process_time()
    samples = await closed_loop([c for c, _ in clients], job["warmup"], job["duration"])
    return {**samples.to_json(), "reused_threads": sum(s[1] for _, s in clients),
            "load_cpu_s": time.process_time() - cpu0}


def main() -> None:
    job = json.loads(sys.stdin.read())
    try:
        import uvloop

        result = uvloop.run(run(job))
    except ImportError:
        result = asyncio.run(run(job))
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
