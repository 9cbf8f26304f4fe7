"""(m) ask → answer → get_answers over MCP, beside the same round trip over REST.

One real ``maxclaw serve``; one agent thread per mode; round trips one after another (one
client), alternating MCP and REST so drift hits both:

- MCP: the official SDK's ``ClientSession`` over streamable HTTP at ``/mcp`` (stateless, JSON
  responses), opened once: ``tools/call ask_user_question`` → Max answers (the WebUI's REST
  call) → ``tools/call get_answers`` until the answer is there (it is, at once).
- REST: what the MCP tool does, by hand: post the assistant row and ``execute`` it → the same
  answer call → ``POST /v1/agent/threads/{id}/inbox``.

The difference is what MCP adds (JSON-RPC framing, the SDK's client and server, the
call-id hash) on top of the same service calls. Standalone: ``python -m bench.mcp_rt
[--database-url URL] [-n N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench import roundtrip, server
from bench.dataset import CARD_ARGS
from bench.plan import Plan
from bench.report import say
from bench.stats import summary_ms


async def _identity(url: str) -> roundtrip.Identity:
    async with roundtrip.in_process(url, pool_max=2) as services:
        return (await roundtrip.make_identities(services, "mcp", 1))[0]


async def _thread(user: httpx.AsyncClient, title: str) -> str:
    resp = await user.post("/v1/threads", json={"title": title})
    resp.raise_for_status()
    return str(resp.json()["id"])


async def _answer(user: httpx.AsyncClient, component_id: str) -> None:
    resp = await user.post(f"/v1/components/{component_id}/answer",
                           json={"selected": [CARD_ARGS["questions"][0]["options"][0]["id"]],
                                 "text": None})
    resp.raise_for_status()


async def measure(base_url: str, ident: roundtrip.Identity, n: int) -> dict[str, Any]:
    """``n`` round trips each way; latencies in seconds per mode."""
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    bearer = {"Authorization": f"Bearer {ident.agent_token}"}
    user = httpx.AsyncClient(base_url=base_url, timeout=30,
                             headers={"Authorization": f"Bearer {ident.user_token}"})
    agent = httpx.AsyncClient(base_url=base_url, timeout=30, headers=bearer)
    mcp_thread = await _thread(user, "bench mcp")
    rest_thread = await _thread(user, "bench rest")
    times: dict[str, list[float]] = {"mcp": [], "rest": []}
    async with httpx2.AsyncClient(headers={**bearer, "X-MaxClaw-Thread": mcp_thread},
                                  timeout=30) as http, \
            streamable_http_client(f"{base_url}/mcp", http_client=http) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()

        async def over_mcp() -> None:
            posted = (await session.call_tool("ask_user_question", CARD_ARGS)).structured_content
            await _answer(user, posted["components"][0]["id"])
            # the answer is committed before the answer call returns: one call gets it
            got = (await session.call_tool("get_answers", {})).structured_content
            if len(got["messages"]) != 1:
                raise RuntimeError(f"get_answers returned {got}")

        async def over_rest(i: int) -> None:
            call_id = f"bench_{i}"
            resp = await agent.post(f"/v1/agent/threads/{rest_thread}/messages", json={
                "role": "assistant", "content": None, "tool_calls": [
                    {"id": call_id, "type": "function",
                     "function": {"name": "ask_user_question",
                                  "arguments": json.dumps(CARD_ARGS)}}]})
            resp.raise_for_status()
            resp = await agent.post(f"/v1/agent/threads/{rest_thread}/tool-calls/{call_id}"
                                    "/execute")
            resp.raise_for_status()
            await _answer(user, resp.json()["content"]["components"][0]["id"])
            got = (await agent.post(f"/v1/agent/threads/{rest_thread}/inbox")).json()
            if len(got["messages"]) != 1:
                raise RuntimeError(f"the inbox returned {got}")

        for i in range(n + max(3, n // 10)):  # the first few warm both paths up
            for mode in ("mcp", "rest") if i % 2 == 0 else ("rest", "mcp"):
                start = time.perf_counter()
                await (over_mcp() if mode == "mcp" else over_rest(i))
                if i >= max(3, n // 10):
                    times[mode].append(time.perf_counter() - start)
    await user.aclose()
    await agent.aclose()
    mcp_s, rest_s = summary_ms(times["mcp"]), summary_ms(times["rest"])
    for s in (mcp_s, rest_s):
        s.pop("quantiles_ms", None)
    return {"clients": 1, "round_trips": n, "mcp": mcp_s, "rest": rest_s,
            "mcp_over_rest_p50": round(mcp_s["p50_ms"] / rest_s["p50_ms"], 2)}


async def mcp_item(url: str, plan: Plan, log_dir: Path) -> dict[str, Any]:
    """The suite's MCP line (``bench.run.ITEMS``)."""
    n = 50 if plan.name == "quick" else 200
    srv = server.start(url, log_dir / "serve-mcp.log")
    try:
        report = await measure(srv.base_url, await _identity(url), n)
    finally:
        srv.stop()
    say(f"  MCP p50 {report['mcp']['p50_ms']} ms, p99 {report['mcp']['p99_ms']} ms; "
          f"REST p50 {report['rest']['p50_ms']} ms, p99 {report['rest']['p99_ms']} ms "
          f"(MCP/REST at p50: {report['mcp_over_rest_p50']})")
    return report


def main() -> None:
    from bench.pg import BenchDatabase, choose_server

    parser = argparse.ArgumentParser(prog="python -m bench.mcp_rt",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--database-url")
    parser.add_argument("-n", type=int, default=200)
    args = parser.parse_args()
    pg = choose_server(args.database_url)
    db = BenchDatabase(pg)
    url = db.create()
    try:
        log_dir = Path(tempfile.mkdtemp(prefix="maxclaw-bench-mcp-"))
        srv = server.start(url, log_dir / "serve-mcp.log")
        try:
            report = asyncio.run(_run(srv.base_url, url, args.n))
        finally:
            srv.stop()
    finally:
        db.drop()
        pg.stop()
    print(json.dumps(report, indent=1))


async def _run(base_url: str, url: str, n: int) -> dict[str, Any]:
    return await measure(base_url, await _identity(url), n)


if __name__ == "__main__":
    main()
