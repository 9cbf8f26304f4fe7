"""Who is calling: tokens become a ``Principal``; users are created with their Main thread."""

from __future__ import annotations

import hashlib
import secrets
import time
import uuid
from dataclasses import dataclass
from typing import Literal

import asyncpg

from maxclaw.auth import store
from maxclaw.db.database import Database
from maxclaw.errors import Conflict, Forbidden, Invalid, NotFound, Unauthorized

Role = Literal["user", "agent"]


@dataclass(frozen=True, slots=True)
class Principal:
    """The authenticated caller: a user's client or an agent runtime acting for that user."""

    user_id: str
    name: str
    role: Role
    thread_id: str | None = None  # an agent token bound to one thread

    def require_role(self, role: Role) -> None:
        if self.role != role:
            raise Forbidden(f"This endpoint is for {role} tokens; this is a {self.role} token.")

    def check_thread(self, thread_id: str) -> None:
        """A thread-bound agent token reaches only its thread (others look absent: 404)."""
        if self.thread_id is not None and self.thread_id != thread_id:
            raise NotFound("No such thread.")


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def parse_uuid(value: str, what: str = "thread") -> str:
    """A canonical UUID string, or 404: a malformed id names nothing, like a missing one."""
    try:
        return str(uuid.UUID(value))
    except (ValueError, AttributeError, TypeError):
        raise NotFound(f"No such {what}.") from None


def parse_int_id(value: str | int, what: str) -> int:
    """A positive bigint id from a path, or 404: a malformed or out-of-range id names nothing."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise NotFound(f"No such {what}.") from None
    if not 0 < number < 2**63:
        raise NotFound(f"No such {what}.")
    return number


TOKEN_CACHE_TTL_S = 30.0
TOKEN_CACHE_SIZE = 10_000


class AuthService:
    """Users, tokens and authentication.

    Known tokens are cached in-process for ``TOKEN_CACHE_TTL_S``: authenticating was one extra
    query (and pool round trip) on every request, and tokens are never revoked in place
    (there is no revoke endpoint). Unknown tokens are never cached, so a flood of bad tokens
    cannot grow the cache.
    """

    def __init__(self, db: Database) -> None:
        self.db = db
        self._cache: dict[str, tuple[float, Principal]] = {}

    async def create_user(self, name: str) -> tuple[str, str]:
        """Create a user and its Main thread; returns ``(user_id, main_thread_id)``."""
        if not name.strip():
            raise Invalid.at(["name"], "a user needs a non-empty name")
        try:
            async with self.db.transaction() as conn:
                user = await store.insert_user(conn, name)
                main = await store.insert_main_thread(conn, user["id"])
        except asyncpg.UniqueViolationError:
            raise Conflict(f"A user named {name!r} already exists.") from None
        return user["id"], main

    async def create_token(self, user_name: str, role: Role, thread_id: str | None = None) -> str:
        """Mint a token for ``user_name``; only its hash is stored. Returns the token once."""
        if role not in ("user", "agent"):
            raise Invalid.at(["role"], "role must be 'user' or 'agent'")
        if thread_id is not None and role != "agent":
            raise Invalid.at(["thread"], "only agent tokens can be bound to a thread")
        token = f"mc_{role[0]}_" + secrets.token_urlsafe(32)
        async with self.db.transaction() as conn:
            user = await store.user_by_name(conn, user_name)
            if user is None:
                raise NotFound(f"No user named {user_name!r}; "
                               "create it with `maxclaw user create`.")
            if thread_id is not None:
                thread_id = parse_uuid(thread_id)
                if await store.thread_owner(conn, thread_id) != user["id"]:
                    raise NotFound(f"User {user_name!r} has no thread {thread_id}.")
            await store.insert_token(conn, user["id"], role, thread_id, hash_token(token))
        return token

    async def authenticate(self, token: str | None) -> Principal:
        """The principal behind a bearer token, or ``Unauthorized``."""
        if not token:
            raise Unauthorized("Missing token: send 'Authorization: Bearer <token>'.")
        digest = hash_token(token)
        now = time.monotonic()
        cached = self._cache.get(digest)
        if cached is not None and cached[0] > now:
            return cached[1]
        async with self.db.connection() as conn:
            row = await store.principal_by_hash(conn, digest)
        if row is None:
            raise Unauthorized("Unknown token.")
        principal = Principal(user_id=row["user_id"], name=row["name"], role=row["role"],
                              thread_id=row["thread_id"])
        if len(self._cache) >= TOKEN_CACHE_SIZE:
            self._cache.clear()  # crude but bounded; a refill costs one query per token
        self._cache[digest] = (now + TOKEN_CACHE_TTL_S, principal)
        return principal

    async def main_thread_id(self, user_id: str) -> str | None:
        async with self.db.connection() as conn:
            return await store.main_thread_of(conn, user_id)
