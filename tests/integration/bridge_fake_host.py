"""A fake agent host for the bridge tests: it records each invocation, and on the prompt
``start`` (or one ending in ``[ask]``) asks Max a card through ``/mcp`` with the official MCP
SDK's client, as Claude Code would. Run as ``python bridge_fake_host.py RECORDS URL THREAD
PROMPT`` with the agent token in MAXCLAW_TOKEN. ``FAKE_HOST_HOLD``: a file; while it exists
the host keeps running.
``FAKE_HOST_EXIT``: the exit status (default 0). ``FAKE_HOST_SLEEP``: seconds to hang."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

CARD = {"title": "Release", "questions": [
    {"id": "ship", "kind": "choice", "question": "Ship 2.0 today?",
     "options": [{"id": "yes", "label": "Ship it", "recommended": True},
                 {"id": "no", "label": "Wait a week"}]}]}


async def ask(url: str, thread: str, title: str) -> str:
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {os.environ['MAXCLAW_TOKEN']}"}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http, \
            streamable_http_client(f"{url}/mcp?thread_id={thread}", http_client=http) as (
                read, write), ClientSession(read, write) as session:
        await session.initialize()
        # a title of its own: the same arguments on a new connection replay the first card
        result = await session.call_tool("ask_user_question", {**CARD, "title": title})
    return str(result.structured_content["components"][0]["id"])


def main() -> int:
    records, url, thread, prompt = sys.argv[1:5]
    record = {"pid": os.getpid(), "prompt": prompt, "argv": sys.argv[1:], "at": time.time()}
    with Path(records).open("a") as f:
        f.write(json.dumps(record) + "\n")
    if prompt == "start" or prompt.endswith("[ask]"):
        runs = len(Path(records).read_text().splitlines())
        component = asyncio.run(ask(url, thread, f"Release, run {runs}"))
        with Path(records).open("a") as f:
            f.write(json.dumps({"asked": component}) + "\n")
    hold = os.environ.get("FAKE_HOST_HOLD")
    while hold and Path(hold).exists():
        time.sleep(0.05)
    time.sleep(float(os.environ.get("FAKE_HOST_SLEEP", "0")))
    return int(os.environ.get("FAKE_HOST_EXIT", "0"))


if __name__ == "__main__":
    sys.exit(main())
