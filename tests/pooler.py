"""PgBouncer for tests: Debian's ``pgbouncer`` in transaction mode in front of the test server,
started once per pytest worker like the database (``MAXCLAW_TEST_PGBOUNCER=1``).

Every test database is reachable through it under its own name (a ``*`` wildcard entry), so
a test's ``database_url`` becomes the pooled URL and ``app_settings`` / ``start_server`` add
the direct URL for LISTEN (``MAXCLAW_LISTEN_DATABASE_URL``) and ``MAXCLAW_DB_POOLER``.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from maxclaw.db.urls import plain_url

ENABLE_ENV = "MAXCLAW_TEST_PGBOUNCER"
# pooled URL -> the same database, direct
DIRECT: dict[str, str] = {}


def enabled() -> bool:
    return os.environ.get(ENABLE_ENV, "") not in ("", "0")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgBouncer:
    def __init__(self, server_url: str, base: Path) -> None:
        self.server = urlsplit(plain_url(server_url))
        self.base = base
        self.port = _free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def _config(self) -> str:
        query = parse_qs(self.server.query)
        host = (query.get("host") or [self.server.hostname or "127.0.0.1"])[0]
        port = (query.get("port") or [str(self.server.port or 5432)])[0]
        target = f"host={host} port={port}"
        if self.server.password:
            target += f" password={self.server.password}"
        return "\n".join([
            "[databases]",
            f"* = {target}",
            "[pgbouncer]",
            "listen_addr = 127.0.0.1",
            f"listen_port = {self.port}",
            "unix_socket_dir =",
            "auth_type = trust",
            f"auth_file = {self.base / 'userlist.txt'}",
            "pool_mode = transaction",
            "max_client_conn = 2000",
            "default_pool_size = 20",
            "server_reset_query =",
            # what asyncpg and libpq may send at start-up that PgBouncer does not track
            "ignore_startup_parameters = extra_float_digits,options",
            f"logfile = {self.base / 'pgbouncer.log'}",
            f"pidfile = {self.base / 'pgbouncer.pid'}",
            "",
        ])

    def start(self) -> None:
        binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
        if not Path(binary).exists():
            raise RuntimeError("pgbouncer is not installed: run scripts/install-pgbouncer.sh")
        self.base.mkdir(parents=True, exist_ok=True)
        user = self.server.username or "postgres"
        (self.base / "userlist.txt").write_text(f'"{user}" ""\n')
        ini = self.base / "pgbouncer.ini"
        ini.write_text(self._config())
        args = [binary, str(ini)]
        if os.geteuid() == 0:  # PgBouncer refuses to run as root
            runas = "postgres" if _user_exists("postgres") else "nobody"
            self.base.chmod(0o777)
            for path in self.base.iterdir():
                path.chmod(0o666)
            args[1:1] = ["-u", runas]
        # stderr to a file, never a pipe: PgBouncer logs every connection to stderr too, and
        # a pipe nobody reads fills (64 KiB) and blocks it mid-write — it then stops answering
        # without exiting, which is how the first version of this harness lost a worker
        stderr_path = self.base / "pgbouncer.stderr"
        with stderr_path.open("ab") as stderr:
            self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=stderr)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = stderr_path.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"pgbouncer exited: {err}{self.log_tail()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.05)  # another process: poll its port, bounded by the deadline
        raise RuntimeError(f"pgbouncer did not listen:{self.log_tail()}")

    def log_tail(self) -> str:
        log = self.base / "pgbouncer.log"
        return "\n" + log.read_text()[-3000:] if log.exists() else ""

    def route(self, direct_url: str) -> str:
        """The pooled URL of the database ``direct_url`` names."""
        parts = urlsplit(plain_url(direct_url))
        user = parts.username or "postgres"
        netloc = f"{user}@127.0.0.1:{self.port}"
        pooled = parts._replace(netloc=netloc, query="").geturl()
        DIRECT[pooled] = direct_url
        return pooled

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def settings_for(url: str) -> dict[str, Any]:
    """Extra settings for an app on ``url``: the direct LISTEN URL when it is pooled."""
    direct = DIRECT.get(url)
    if direct is None:
        return {}
    return {"listen_database_url": direct, "db_pooler": "pgbouncer"}


def env_for(url: str) -> dict[str, str]:
    return {f"MAXCLAW_{k.upper()}": str(v) for k, v in settings_for(url).items()}
