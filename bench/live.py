"""Items 2 and 3: answer → frame with many WebSocket clients, and answer → claim.

The orchestrator makes the users, tokens and open cards (cards through ``bench.floor``, the
service's own statements), starts a real ``maxclaw serve``, and hands the timing to
``bench.live_load`` in a separate process.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from bench import server
from bench.stats import summary_ms
from maxclaw.auth.service import hash_token
from maxclaw.db.database import connect

MAKE_USERS = """
INSERT INTO users (name) SELECT $1 || g FROM generate_series(1, $2) g RETURNING id::text
"""
MAKE_MAINS = """
INSERT INTO threads (user_id, kind, title) SELECT u, 'main', 'Main' FROM unnest($1::uuid[]) u
"""
MAKE_TOKENS = """
INSERT INTO api_tokens (user_id, role, token_hash)
SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[])
"""
MAKE_THREAD = """
INSERT INTO threads (user_id, kind, title) VALUES ($1::uuid, 'normal', 'live') RETURNING id::text
"""


async def make_users(conn: asyncpg.Connection, prefix: str, count: int,
                     roles: tuple[str, ...] = ("user",)) -> list[dict[str, Any]]:
    """``count`` users with a Main thread and one token per role, in a few statements."""
    async with conn.transaction():
        await conn.execute("SET LOCAL maxclaw.notify = 'off'")
        ids = [r["id"] for r in await conn.fetch(MAKE_USERS, prefix, count)]
        await conn.execute(MAKE_MAINS, ids)
        users = [{"user_id": i, **{role: f"mc_{role[0]}_" + secrets.token_urlsafe(32)
                                   for role in roles}} for i in ids]
        rows = [(u["user_id"], role, hash_token(u[role])) for u in users for role in roles]
        await conn.execute(MAKE_TOKENS, *map(list, zip(*rows, strict=True)))
    return users


Poster = Callable[[asyncpg.Connection, str, str, str], Awaitable[Any]]


async def open_cards(conn: asyncpg.Connection, post: Poster, owners: list[dict[str, Any]],
                     tag: str) -> list[dict[str, Any]]:
    """One open card in a fresh thread for each owner (repeats allowed), posted with ``post``
    (the floor's replay of the service's statements)."""
    cards = []
    for i, owner in enumerate(owners):
        thread = await conn.fetchval(MAKE_THREAD, owner["user_id"])
        await post(conn, owner["user_id"], thread, f"{tag}_{i}")
        cards.append({"component_id": f"{tag}_{i}:q1", "thread_id": thread,
                      "token": owner["user"]})
    return cards


HUB_METRICS = ("maxclaw_realtime_batch_seconds_sum", "maxclaw_realtime_batch_seconds_count",
               "maxclaw_realtime_hints_total", "maxclaw_realtime_frames_total")


def hub_metrics(base_url: str) -> dict[str, float]:
    """The realtime hub's own counters from ``/metrics``: catch-up batches, hints, frames."""
    text = httpx.get(base_url + "/metrics", timeout=10).text
    out: dict[str, float] = {}
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in HUB_METRICS:
            out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    batches = out.get("maxclaw_realtime_batch_seconds_count", 0.0)
    if batches:
        out["mean_batch_ms"] = round(
            out["maxclaw_realtime_batch_seconds_sum"] / batches * 1000, 3)
    return out


def _load(job: dict[str, Any], timeout: float) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", "bench.live_load"], input=json.dumps(job),
                          capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"the live load process failed:\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


async def answer_to_frame(url: str, log_dir: Path, post: Poster, clients: int, answers: int,
                          rate: float = 20.0, tag: str = "ws", poll_only_s: float | None = None,
                          ) -> dict[str, Any]:
    """``clients`` users, one socket each; ``answers`` of their cards answered at ``rate``/s.

    ``poll_only_s`` is the other design the issue asks to measure: no NOTIFY on the write path
    (``maxclaw.notify = off`` for every session of this database) and the hub polling the
    cursor query every ``poll_only_s`` seconds."""
    conn = await connect(url)
    try:
        users = await make_users(conn, f"{tag}_", clients)
        cards = await open_cards(conn, post, [users[i % clients] for i in range(answers)], tag)
        db = await conn.fetchval("SELECT current_database()")
        if poll_only_s is not None:
            await conn.execute(f'ALTER DATABASE "{db}" SET maxclaw.notify = \'off\'')
    finally:
        await conn.close()
    env = {} if poll_only_s is None else {"MAXCLAW_REALTIME_POLL_S": str(poll_only_s)}
    srv = await asyncio.to_thread(server.start, url, log_dir / f"serve-{tag}.log", env)
    try:
        job = {"kind": "frames", "host": "127.0.0.1", "port": srv.port,
               "server_pid": srv.proc.pid, "tokens": [u["user"] for u in users],
               "answers": cards, "rate": rate}
        result = await asyncio.to_thread(_load, job, 600)
        result["hub"] = await asyncio.to_thread(hub_metrics, srv.base_url)
    finally:
        srv.stop()
        if poll_only_s is not None:
            conn = await connect(url)
            try:
                await conn.execute(f'ALTER DATABASE "{db}" RESET maxclaw.notify')
            finally:
                await conn.close()
    latencies = result.pop("latencies_s")
    return {**result, "latency": summary_ms(latencies),
            "negative": sum(1 for x in latencies if x < 0)}


async def answer_to_claim(url: str, log_dir: Path, post: Poster, answers: int,
                          gap_s: float = 0.05) -> dict[str, Any]:
    """One runtime long-polling claim; ``answers`` cards on idle threads answered one by one."""
    conn = await connect(url)
    try:
        owner = (await make_users(conn, "claim_", 1, roles=("user", "agent")))[0]
        cards = await open_cards(conn, post, [owner] * answers, "claim")
    finally:
        await conn.close()
    srv = await asyncio.to_thread(server.start, url, log_dir / "serve-claim.log")
    try:
        job = {"kind": "claim", "host": "127.0.0.1", "port": srv.port,
               "agent_token": owner["agent"], "user_token": owner["user"], "answers": cards,
               "gap_s": gap_s}
        result = await asyncio.to_thread(_load, job, 600)
    finally:
        srv.stop()
    return {"answers": result["answers"], "errors": result["errors"],
            "error_count": result["error_count"],
            "latency": summary_ms(result["from_response_s"]),
            "from_request": summary_ms(result["from_request_s"])}
