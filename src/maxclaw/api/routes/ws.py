"""``GET /v1/ws``: the realtime stream for user clients (see ``maxclaw.realtime``)."""

from __future__ import annotations

from fastapi import APIRouter, WebSocket

from maxclaw.api.deps import services_of
from maxclaw.realtime.connection import Connection

router = APIRouter()


@router.websocket("/v1/ws")
async def websocket(ws: WebSocket) -> None:
    await Connection(ws, services_of(ws)).run()
