"""Finding 8 (part): ``maxclaw serve`` refuses WebSocket frames over 64 KiB (uvicorn's default
was 16 MiB, which one client could make the server buffer per frame), and closes a connection
whose request headers do not arrive within the header timeout (slowloris)."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.conftest import ServerProcess, start_server
from tests.e2e.test_realtime_server import Cluster


async def test_a_frame_over_64_kib_closes_the_socket(server: ServerProcess,
                                                    tmp_path: Path) -> None:
    cluster = Cluster(server.database_url, tmp_path)
    try:
        max_ = await cluster.user("max", server)
        url = server.base_url.replace("http://", "ws://") + "/v1/ws"
        headers = {"Authorization": f"Bearer {max_.token}"}
        async with connect(url, additional_headers=headers, max_size=None) as ws:
            await ws.recv()  # hello
            await ws.send('{"op": "ping", "pad": "' + "x" * 60_000 + '"}')  # under: served
            assert '"pong"' in str(await asyncio.wait_for(ws.recv(), 10))
            await ws.send('{"op": "ping", "pad": "' + "x" * 70_000 + '"}')
            with pytest.raises(ConnectionClosed) as closed:
                await asyncio.wait_for(ws.recv(), 10)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
    finally:
        await cluster.close()


def _slow_headers(host: str, port: int, gap_s: float, lines: int) -> tuple[float, bytes]:
    """Send a request's header lines one every ``gap_s``; returns (seconds until the server
    closed or answered, what it sent)."""
    start = time.monotonic()
    with socket.create_connection((host, port), timeout=30) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        try:
            for n in range(lines):
                time.sleep(gap_s)
                sock.sendall(f"X-Slow-{n}: {n}\r\n".encode())
            sock.sendall(b"\r\n")
            received = sock.recv(65536)
        except (BrokenPipeError, ConnectionResetError):
            received = b""
        return time.monotonic() - start, received


async def test_headers_that_arrive_too_slowly_close_the_connection(database_url: str,
                                                                   tmp_path: Path) -> None:
    srv = start_server(database_url, tmp_path / "serve.log",
                       env={"MAXCLAW_HEADER_TIMEOUT_S": "2"})
    try:
        url = urlsplit(srv.base_url)
        host, port = url.hostname or "127.0.0.1", url.port or 80
        # one header line every 0.5 s for 20 s: cut off at the 2 s timeout
        took, received = await asyncio.to_thread(_slow_headers, host, port, 0.5, 40)
        assert received == b"" and took < 8, (took, received)
        # headers that arrive in time, even in pieces, are served
        took, received = await asyncio.to_thread(_slow_headers, host, port, 0.2, 3)
        assert received.startswith(b"HTTP/1.1 200"), received
        # a silent connection is closed too
        with socket.create_connection((host, port), timeout=30) as sock:
            start = time.monotonic()
            assert sock.recv(1) == b""
            assert time.monotonic() - start < 6
        # a WebSocket (upgraded) and a long poll outlive the timeout
        cluster = Cluster(srv.database_url, tmp_path)
        try:
            max_ = await cluster.user("max", srv)
            headers = {"Authorization": f"Bearer {max_.token}"}
            ws_url = srv.base_url.replace("http://", "ws://") + "/v1/ws"
            async with connect(ws_url, additional_headers=headers) as ws:
                await ws.recv()  # hello
                await asyncio.sleep(3)
                await ws.send('{"op": "ping"}')
                assert '"pong"' in str(await asyncio.wait_for(ws.recv(), 10))
        finally:
            await cluster.close()
    finally:
        srv.stop()
