"""The operator's users: list them, delete one with everything of it (``maxclaw user …``)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from maxclaw.db.database import Database
from maxclaw.errors import Conflict, NotFound
from maxclaw.housekeeping import store


class UserHousekeeping:
    """``maxclaw user list`` and ``maxclaw user delete``."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def me(self, user_id: str) -> dict[str, Any]:
        """``GET /v1/me``'s counts: created_at, threads (listed), archived_threads, devices,
        tokens."""
        async with self.db.connection() as conn:
            row = await store.me(conn, user_id)
        return {} if row is None else asdict(row)

    async def list(self) -> list[dict[str, Any]]:
        """Every user: id, name, created_at and how many threads, tokens, devices and running
        turns it has."""
        async with self.db.connection() as conn:
            return [asdict(r) for r in await store.list_users(conn)]

    async def delete(self, name: str, *, force: bool = False) -> str:
        """Delete the user ``name`` and every row of it (threads, messages, cards, sealed
        secrets, audit, tokens, devices, outbox…) in one transaction; refused (409) while a
        turn of theirs is running unless ``force``. Returns the user's id."""
        async with self.db.transaction() as conn:
            user_id = await store.lock_user(conn, name)
            if user_id is None:
                raise NotFound(f"No user {name!r}.")
            running = await store.running_turns(conn, user_id)
            if running and not force:
                raise Conflict(f"{running} turn(s) of {name} are running; wait for them to "
                               "end, or delete anyway with --force.")
            await store.delete_user(conn, user_id)
        return user_id
