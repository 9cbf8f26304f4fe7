"""Finding 8 (part): ``maxclaw serve`` refuses WebSocket frames over 64 KiB (uvicorn's default
was 16 MiB, which one client could make the server buffer per frame)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.conftest import ServerProcess
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
