"""(h) The command hook's latency, as a host pays it: one process per hook invocation.

One real ``maxclaw serve`` and one thread; each sample starts a fresh process, feeds it the
host's event on stdin and waits for it to exit (the wall time a host waits):

- ``python -S -c pass``: the floor, an interpreter that does nothing (on a loaded machine
  this alone is most of the hook's time);
- the request alone: ``maxclaw.hook.take_inbox`` in this warm process (the server's part);
- ``hook -S``: ``python -S -m maxclaw.hook`` (stdlib only, no site-packages scan);
- ``hook``: ``python -m maxclaw.hook`` (what the ``maxclaw-hook`` console script costs);
- ``hook, answer waiting``: the same with a message of Max's waiting, delivered by a Stop hook
  as ``{"decision": "block"}`` (so the sample includes the delivery);
- ``maxclaw inbox``: the CLI's ``inbox --format hook``, the path the hook replaces (fewer
  samples: it is slow).

Standalone: ``python -m bench.hook_latency [--database-url URL] [-n N]``; prints JSON with
p50/p99 in ms per mode and the machine's load average.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench import roundtrip, server
from bench.stats import summary_ms

SRC = str(Path(__file__).resolve().parent.parent / "src")


def _env(base_url: str, token: str, thread: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAXCLAW_")}
    return {**env, "MAXCLAW_URL": base_url, "MAXCLAW_TOKEN": token, "MAXCLAW_THREAD": thread,
            "PYTHONPATH": SRC}


def _once(argv: list[str], event: dict[str, Any], env: dict[str, str]) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(argv, input=json.dumps(event), env=env, capture_output=True,
                          text=True, timeout=60, check=True)
    return time.perf_counter() - started, done.stdout


def measure(base_url: str, ident: roundtrip.Identity, thread: str, n: int) -> dict[str, Any]:
    env = _env(base_url, ident.agent_token, thread)
    prompt = {"hook_event_name": "UserPromptSubmit", "prompt": "go on"}
    stop = {"hook_event_name": "Stop", "stop_hook_active": False}
    py = sys.executable
    from maxclaw.hook import take_inbox

    modes: dict[str, list[float]] = {"python -S -c pass (floor)": [],
                                     "the request alone (warm process)": [], "hook -S": [],
                                     "hook": [], "hook, answer waiting": [],
                                     "maxclaw inbox": []}
    with httpx.Client(base_url=base_url, timeout=30,
                      headers={"Authorization": f"Bearer {ident.user_token}"}) as user:
        for i in range(n):
            modes["python -S -c pass (floor)"].append(_once([py, "-S", "-c", "pass"], {},
                                                            env)[0])
            started = time.perf_counter()
            take_inbox(base_url, ident.agent_token, thread)
            modes["the request alone (warm process)"].append(time.perf_counter() - started)
            modes["hook -S"].append(_once([py, "-S", "-m", "maxclaw.hook"], prompt, env)[0])
            modes["hook"].append(_once([py, "-m", "maxclaw.hook"], prompt, env)[0])
            user.post(f"/v1/threads/{thread}/messages",
                      json={"body": f"answer {i}"}).raise_for_status()
            took, out = _once([py, "-S", "-m", "maxclaw.hook"], stop, env)
            assert json.loads(out)["decision"] == "block", out
            modes["hook, answer waiting"].append(took)
            if i % 10 == 0:
                modes["maxclaw inbox"].append(_once(
                    [py, "-m", "maxclaw.cli", "inbox", "--format", "hook", "--thread", thread],
                    prompt, env)[0])
    return {"samples": {k: len(v) for k, v in modes.items()},
            "ms": {k: {name: value for name, value in summary_ms(v).items()
                       if name != "quantiles_ms"} for k, v in modes.items()},
            "loadavg_1m_before_after": None}


async def _setup(url: str, base_url: str) -> tuple[roundtrip.Identity, str]:
    async with roundtrip.in_process(url, pool_max=2) as services:
        ident = (await roundtrip.make_identities(services, "hook", 1))[0]
    async with httpx.AsyncClient(base_url=base_url, timeout=30,
                                 headers={"Authorization": f"Bearer {ident.user_token}"}) as h:
        resp = await h.post("/v1/threads", json={"title": "hook bench"})
        resp.raise_for_status()
        return ident, str(resp.json()["id"])


def main() -> None:
    from bench.pg import BenchDatabase, choose_server

    parser = argparse.ArgumentParser(prog="python -m bench.hook_latency",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--database-url")
    parser.add_argument("-n", type=int, default=200)
    args = parser.parse_args()
    pg = choose_server(args.database_url)
    db = BenchDatabase(pg)
    url = db.create()
    try:
        log_dir = Path(tempfile.mkdtemp(prefix="maxclaw-bench-hook-"))
        srv = server.start(url, log_dir / "serve-hook.log")
        try:
            ident, thread = asyncio.run(_setup(url, srv.base_url))
            load_before = os.getloadavg()[0]
            report = measure(srv.base_url, ident, thread, args.n)
            report["loadavg_1m_before_after"] = [load_before, os.getloadavg()[0]]
        finally:
            srv.stop()
    finally:
        db.drop()
        pg.stop()
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
