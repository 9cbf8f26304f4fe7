"""A header read timeout for ``maxclaw serve`` (slowloris).

uvicorn times out idle keep-alive connections but not a request whose headers arrive slowly:
a client that sends one header line every few seconds holds a connection (and a file
descriptor) for as long as it likes, and a few thousand of them starve the server. The
protocol classes below wrap uvicorn's own: from the moment a connection opens (or a response
completes and the connection waits for the next request) the complete request headers must
arrive within ``header_timeout_s``, or the connection is closed. A request whose headers have
arrived (its body, a long poll, a WebSocket after its upgrade) is not affected.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # pragma: no cover - httptools is optional for uvicorn
    HttpToolsProtocol = None  # type: ignore[assignment,misc]


class _HeaderTimeout:
    """Mixin over a uvicorn HTTP protocol (it provides loop, transport and cycle)."""

    header_timeout_s: float = 10.0
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    cycle: Any

    def _arm_header_timer(self) -> None:
        self._disarm_header_timer()
        self._armed_cycle = self.cycle
        self._header_timer: asyncio.TimerHandle | None = self.loop.call_later(
            self.header_timeout_s, self._header_timed_out)

    def _disarm_header_timer(self) -> None:
        timer = getattr(self, "_header_timer", None)
        if timer is not None:
            timer.cancel()
        self._header_timer = None

    def _header_timed_out(self) -> None:
        self._header_timer = None
        transport = self.transport
        protocol: object = transport.get_protocol()
        if transport.is_closing() or protocol is not self:
            return  # closed already, or upgraded to a WebSocket
        waiting = self.cycle is self._armed_cycle and (
            self.cycle is None or self.cycle.response_complete)
        if waiting:  # no complete request headers since the timer started
            transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        self._arm_header_timer()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)  # type: ignore[misc]
        if self.cycle is not self._armed_cycle:  # a new request's headers are complete
            self._disarm_header_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()  # type: ignore[misc]
        if not self.transport.is_closing():
            self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        super().connection_lost(exc)  # type: ignore[misc]


def http_protocol(header_timeout_s: float) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol (httptools when installed, else h11) with the header timeout."""
    base: type[Any] = HttpToolsProtocol if HttpToolsProtocol is not None else H11Protocol
    return type("HeaderTimeoutProtocol", (_HeaderTimeout, base),
                {"header_timeout_s": header_timeout_s})
