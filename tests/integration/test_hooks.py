"""``maxclaw.hook`` (the ``maxclaw-hook`` command) run as Claude Code runs it: a process per
event, the event's JSON on stdin, against a real ``maxclaw serve``. SessionStart and
UserPromptSubmit inject what arrived since the last delivery; Stop blocks only when an answer
waits and never twice in a row (``stop_hook_active``); an unreachable server or a missing
configuration prints nothing and exits 0; the module imports nothing outside the standard
library."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from maxclaw.hook import HOOK_HEADER, STOP_HEADER
from tests.conftest import ServerProcess, free_port
from tests.integration.test_mcp import (
    answer_on_card,
    ask_and_check,
    http_session,
    new_thread,
    people,
    rest,
    serve,
    servers,
)

__all__ = ["servers"]  # the fixture, used by name
pytestmark = pytest.mark.timeout(300)
SRC = str(Path(__file__).resolve().parents[2] / "src")


def hook(event: dict[str, Any], url: str, token: str | None, thread: str | None,
         *, no_site: bool = False) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAXCLAW_")}
    env.update({"MAXCLAW_URL": url, "PYTHONPATH": SRC})
    if token:
        env["MAXCLAW_TOKEN"] = token
    if thread:
        env["MAXCLAW_THREAD"] = thread
    argv = [sys.executable, *(["-S"] if no_site else []), "-m", "maxclaw.hook"]
    done = subprocess.run(argv, input=json.dumps(event), env=env, capture_output=True,
                          text=True, timeout=60)
    return done.returncode, done.stdout, done.stderr


async def run_hook(event: dict[str, Any], url: str, token: str | None, thread: str | None,
                   *, no_site: bool = False) -> tuple[int, str, str]:
    return await asyncio.to_thread(hook, event, url, token, thread, no_site=no_site)


def context_of(out: str, event: str) -> str:
    data = json.loads(out)
    assert data["hookSpecificOutput"]["hookEventName"] == event
    text: str = data["hookSpecificOutput"]["additionalContext"]
    assert text.startswith(HOOK_HEADER)
    return text


async def post_as_max(srv: ServerProcess, token: str, thread: str, body: str) -> None:
    async with rest(srv.base_url, token) as http:
        assert (await http.post(f"/v1/threads/{thread}/messages",
                                json={"body": body})).status_code == 201


async def test_session_start_and_prompt_inject_each_answer_once(
        database_url: str, tmp_path: Path, servers: list[ServerProcess]) -> None:
    srv = serve(servers, database_url, tmp_path)
    [max_] = await people(database_url, "max")
    thread = await new_thread(srv.base_url, max_)
    start = {"hook_event_name": "SessionStart", "source": "resume"}
    assert await run_hook(start, srv.base_url, max_.agent_token, thread) == (0, "", "")

    async with http_session(srv.base_url, max_.agent_token, thread) as session:
        component = await ask_and_check(session)
    await answer_on_card(srv.base_url, max_, component, "yes")
    code, out, _ = await run_hook(start, srv.base_url, max_.agent_token, thread, no_site=True)
    assert code == 0
    assert "Ship it" in context_of(out, "SessionStart")
    assert await run_hook(start, srv.base_url, max_.agent_token, thread) == (0, "", "")

    await post_as_max(srv, max_.user_token, thread, "Also bump the version")
    prompt = {"hook_event_name": "UserPromptSubmit", "prompt": "go on"}
    code, out, _ = await run_hook(prompt, srv.base_url, max_.agent_token, thread)
    assert code == 0
    assert "Also bump the version" in context_of(out, "UserPromptSubmit")
    assert await run_hook(prompt, srv.base_url, max_.agent_token, thread) == (0, "", "")


async def test_stop_blocks_only_for_a_waiting_answer_and_never_loops(
        database_url: str, tmp_path: Path, servers: list[ServerProcess]) -> None:
    srv = serve(servers, database_url, tmp_path)
    [max_] = await people(database_url, "max")
    thread = await new_thread(srv.base_url, max_)
    url, token = srv.base_url, max_.agent_token

    # nothing waiting: the stop goes through
    assert await run_hook({"hook_event_name": "Stop", "stop_hook_active": False},
                          url, token, thread) == (0, "", "")

    # Claude Code's loop: stop → hook → (blocked: go on, stop again with the flag set) → …
    # Max keeps writing while it runs; still the host stops after one block.
    await post_as_max(srv, max_.user_token, thread, "Ship it after all")
    active, blocks, stops = False, [], 0
    for _ in range(5):
        stops += 1
        code, out, _ = await run_hook({"hook_event_name": "Stop", "stop_hook_active": active},
                                      url, token, thread)
        assert code == 0
        if not out:
            break
        decision = json.loads(out)
        assert decision["decision"] == "block"
        blocks.append(decision["reason"])
        active = True
        await post_as_max(srv, max_.user_token, thread, f"and one more thing ({stops})")
    assert stops == 2 and len(blocks) == 1, blocks
    assert blocks[0].startswith(STOP_HEADER) and "Ship it after all" in blocks[0]
    # what arrived while the flag was set was not taken: the next prompt gets it
    code, out, _ = await run_hook({"hook_event_name": "UserPromptSubmit"}, url, token, thread)
    assert code == 0
    assert "and one more thing (1)" in context_of(out, "UserPromptSubmit")


async def test_unreachable_or_unconfigured_prints_nothing_and_exits_0(
        database_url: str, tmp_path: Path, servers: list[ServerProcess]) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    for event in ("SessionStart", "UserPromptSubmit", "PostToolUse", "Stop"):
        assert await run_hook({"hook_event_name": event}, dead, "t", "x") == (0, "", "")
    srv = serve(servers, database_url, tmp_path)
    [max_] = await people(database_url, "max")
    thread = await new_thread(srv.base_url, max_)
    await post_as_max(srv, max_.user_token, thread, "waiting")
    for token, where in ((None, thread), (max_.agent_token, None), ("wrong", thread)):
        assert await run_hook({"hook_event_name": "Stop"}, srv.base_url, token,
                              where) == (0, "", "")
    code, out, _ = await run_hook({}, srv.base_url, max_.agent_token, thread)
    assert code == 0
    assert "waiting" in context_of(out, "PostToolUse")  # no event on stdin: after a tool


def test_the_hook_imports_only_the_standard_library() -> None:
    probe = ("import sys, maxclaw.hook; heavy = {'httpx', 'pydantic', 'typer', 'asyncpg', "
             "'maxclaw.client', 'maxclaw.settings'} & set(sys.modules); "
             "assert not heavy, heavy")
    env = {**os.environ, "PYTHONPATH": SRC}
    for flags in ([], ["-S"]):
        done = subprocess.run([sys.executable, *flags, "-c", probe], env=env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
