"""Finding 7: a WebSocket closes when its token expires, as it closes when the token is revoked.

Before, expiry was only checked when a socket opened: a socket kept receiving frames seconds
after its token had expired. Each replica closes the sockets it serves at their token's expiry
(close code 4401), whether the socket authenticated by header or by a ticket.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from tests.realtime_support import live_server

LIFETIME_S = 2.0


async def read_until_closed(ws: ClientConnection, within_s: float) -> None:
    """Read frames until the socket closes (raises ``ConnectionClosed``) or time runs out."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ws.recv(), 0.5)


@pytest.mark.parametrize("via", ["header", "ticket"])
async def test_a_socket_closes_at_its_token_expiry(database_url: str, via: str) -> None:
    async with live_server(database_url) as live:
        await live.services.auth.create_user("max")
        expires = datetime.now(UTC) + timedelta(seconds=LIFETIME_S)
        token = await live.services.auth.create_token("max", "user", expires_at=expires)
        headers = {"Authorization": f"Bearer {token}"}
        url, extra = live.ws_url, headers
        if via == "ticket":
            async with httpx.AsyncClient(base_url=live.base_url, timeout=10) as http:
                resp = await http.post("/v1/ws-ticket", headers=headers)
            assert resp.status_code == 200, resp.text
            url, extra = f"{live.ws_url}?ticket={resp.json()['ticket']}", {}
        async with connect(url, additional_headers=extra) as ws:
            assert '"hello"' in str(await ws.recv())
            with pytest.raises(ConnectionClosed) as closed:
                await read_until_closed(ws, LIFETIME_S + 3.0)  # before: still open 5 s later
            late = (datetime.now(UTC) - expires).total_seconds()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 4401
        assert "expired" in closed.value.rcvd.reason
        assert late < 1.0, f"closed {late:.2f} s after the token expired"
