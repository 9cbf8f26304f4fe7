"""Finding 10 (part): ``serve`` as a superuser or the schema's owner warns at start.

A role without DDL rights exists (issue 14, ``MAXCLAW_APP_ROLE``), but nothing told an
operator who served as ``postgres`` that a stolen connection string could drop the schema.
The test database's role is a superuser; ``test_app_role`` proves the data-only role serves
without the warning.
"""

from __future__ import annotations

import json
from pathlib import Path

from maxclaw.db.roles import privileged_role
from tests.conftest import start_server


def test_serve_as_a_superuser_warns_at_start(database_url: str, tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    server = start_server(database_url, log)
    server.stop()
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    warned = [line for line in lines if line.get("level") == "warning"
              and "superuser" in line.get("msg", line.get("message", ""))]
    # before: nothing said it
    assert len(warned) == 1, log.read_text()[-3000:]
    assert "MAXCLAW_APP_ROLE" in json.dumps(warned[0])


def test_the_check_names_a_superuser(database_url: str) -> None:
    why = privileged_role(database_url)
    assert why is not None and "a superuser" in why
