"""The README's example, run as written against a real ``maxclaw serve``: it asks, Max
answers over HTTP as the WebUI does, and the example prints his answer.

Run from the MaxClaw checkout (it starts the server with the project's test fixtures). The
example runs under ``MAXCLAW_CLIENT_PYTHON`` when set (CI: a venv holding only ``pip install
./clients/python``), else under this interpreter with ``clients/python/src`` on the path."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

import httpx
import pytest
from tests.conftest import ServerProcess
from tests.integration.test_mcp import new_thread, people, serve, servers

__all__ = ["servers"]
pytestmark = pytest.mark.timeout(300)
HERE = Path(__file__).resolve().parent
README = HERE.parent / "README.md"


def example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    return str(blocks[0])


async def test_the_readme_example_asks_and_gets_the_answer(
        database_url: str, tmp_path: Path, servers: list[ServerProcess]) -> None:
    srv = serve(servers, database_url, tmp_path)
    [max_] = await people(database_url, "max")
    thread = await new_thread(srv.base_url, max_)
    python = os.environ.get("MAXCLAW_CLIENT_PYTHON") or sys.executable
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAXCLAW_")}
    env.update({"MAXCLAW_URL": srv.base_url, "MAXCLAW_TOKEN": max_.agent_token,
                "MAXCLAW_THREAD": thread})
    if "MAXCLAW_CLIENT_PYTHON" not in os.environ:
        env["PYTHONPATH"] = str(HERE.parent / "src")
    proc = await asyncio.create_subprocess_exec(
        python, "-c", example(), env=env, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    assert proc.stdout is not None
    first = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
    assert first.startswith("asked "), first
    component = first.split()[1]
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=15, headers={
            "Authorization": f"Bearer {max_.user_token}"}) as http:
        resp = await http.post(f"/v1/components/{component}/answer",
                               json={"selected": ["o1"], "text": None})
    assert resp.status_code == 200, resp.text
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    text = out.decode()
    assert "Chose: Ship it" in text, text
    assert text.endswith("['answered']\n"), text
