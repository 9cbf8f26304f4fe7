"""A webhook receiver in the test process: counts deliveries by ``Idempotency-Key`` and keeps
every raw request (headers and body) so the secrets test can search them."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field


@dataclass
class Receiver:
    """A minimal HTTP/1.1 server on 127.0.0.1 answering 200 to every POST."""

    deliveries: Counter[str] = field(default_factory=Counter)
    raw: list[bytes] = field(default_factory=list)
    port: int = 0
    _server: asyncio.Server | None = None
    _handlers: set[asyncio.Task[None]] = field(default_factory=set)
    _arrived: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def total(self) -> int:
        return sum(self.deliveries.values())

    async def wait_total(self, n: int) -> None:
        """Until at least ``n`` deliveries have arrived (wrap in a timeout)."""
        while self.total < n:
            self._arrived.clear()
            await self._arrived.wait()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def start(self) -> Receiver:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        """Stop listening and end the connections a server left open (keep-alive)."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                headers = {}
                for line in head.decode("latin-1").split("\r\n")[1:]:
                    if ":" in line:
                        k, v = line.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                self.raw.append(head + body)
                key = headers.get("idempotency-key")
                if key:
                    self.deliveries[key] += 1
                self._arrived.set()
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError,
                asyncio.CancelledError):
            pass  # the sender hung up, or stop() ended this keep-alive connection
        finally:
            writer.close()
            self._handlers.discard(task)
