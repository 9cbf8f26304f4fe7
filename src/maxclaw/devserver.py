"""``maxclaw demo``, the server half: an embedded PostgreSQL and the service on a free port,
then the client half (``maxclaw.client.demo.play``) against it over HTTP.

This is a launcher, like ``cli``: it may import both sides of the wire. The client package never
imports the server; the launcher hands it a URL, a user token and a way to mint agent tokens.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import tempfile
import warnings
from pathlib import Path

from maxclaw.client.demo import Say, play


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _serve_and_play(url: str, base_dir: Path, step_delay_s: float, answer_after_s: float,
                          say: Say) -> None:
    import uvicorn

    from maxclaw.app import create_app, services_of
    from maxclaw.settings import Settings

    port = _free_port()
    settings = Settings(database_url=url, port=port, run_sweeper=False,
                        run_push_dispatcher=False, log_level="WARNING")
    app = create_app(settings)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None,
                                           lifespan="on", log_level="warning"))
    serving = asyncio.create_task(server.serve())
    try:
        for _ in range(1200):
            if server.started:
                break
            await asyncio.sleep(0.1)
        else:
            raise TimeoutError("the demo server did not start within 120 s")
        base = f"http://127.0.0.1:{port}"
        say(f"server        {base}")
        auth = services_of(app).auth
        await auth.create_user("max")

        async def mint_agent_token(thread_id: str) -> str:
            return await auth.create_token("max", "agent", thread_id)

        await play(base, await auth.create_token("max", "user"), mint_agent_token, base_dir,
                   step_delay_s, answer_after_s, say)
    finally:
        server.should_exit = True
        await serving


def run_demo(step_delay_s: float = 0.5, answer_after_s: float = 1.0,
             say: Say = print) -> None:
    """Run the whole demo; everything it creates lives in a temporary directory."""
    from maxclaw.db import migrate
    from maxclaw.db.embedded import EmbeddedPostgres

    base = Path(tempfile.mkdtemp(prefix="maxclaw-demo-"))
    base.chmod(0o755)  # as root, pgserver runs postgres as another user
    embedded = EmbeddedPostgres(base / "db")
    say("MaxClaw demo: seed 004, level 4 — ask without blocking, keep working")
    try:
        with warnings.catch_warnings():  # pgserver's note about XDG_RUNTIME_DIR is noise here
            warnings.simplefilter("ignore")
            url = embedded.start()
        say(f"database      embedded PostgreSQL in {base / 'db'}")
        migrate.upgrade(url)
        asyncio.run(_serve_and_play(url, base, step_delay_s, answer_after_s, say))
    finally:
        embedded.stop()
        shutil.rmtree(base, ignore_errors=True)
