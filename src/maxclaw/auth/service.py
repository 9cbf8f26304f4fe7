"""Who is calling: tokens become a ``Principal``; users are created with their Main thread."""

from __future__ import annotations

import hashlib
import secrets
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, cast

import asyncpg

from maxclaw.auth import store
from maxclaw.auth.revocations import RevocationListener
from maxclaw.auth.rows import AccountTokenRow, TokenPrincipalRow, TokenRow
from maxclaw.db.database import Database
from maxclaw.db.listen import Listener
from maxclaw.errors import Conflict, Forbidden, Invalid, NotFound, Unauthorized
from maxclaw.wire.models import MintedToken, SigninCode, Ticket, Token, Tokens

Role = Literal["user", "agent"]


@dataclass(frozen=True, slots=True)
class Principal:
    """The authenticated caller: a user's client or an agent runtime acting for that user."""

    user_id: str
    name: str
    role: Role
    thread_id: str | None = None  # an agent token bound to one thread
    token_id: int | None = None  # the API token that authenticated (audit rows name it)
    for_main: bool = False  # an unbound agent token allowed to write in Main's thread
    # when the token stops working (a WebSocket closes then); not part of the identity
    expires_at: datetime | None = field(default=None, compare=False)

    def require_role(self, role: Role) -> None:
        if self.role != role:
            raise Forbidden(f"This endpoint is for {role} tokens; this is a {self.role} token.")

    def check_thread(self, thread_id: str) -> None:
        """A thread-bound agent token reaches only its thread (others look absent: 404)."""
        if self.thread_id is not None and self.thread_id != thread_id:
            raise NotFound("No such thread.")

    @property
    def writes_in_main(self) -> bool:
        """May this caller write in its user's Main thread? Max's own tokens, a token bound to
        Main's thread, and an unbound agent token flagged ``for_main`` may; any other agent
        token may not (issue 14, finding 6: Main reads hand-offs, so its thread is where a
        misbehaving agent would most like its words to land). A token bound to another thread
        never reaches Main at all (``check_thread``), so "bound" here means bound to Main."""
        return self.role == "user" or self.thread_id is not None or self.for_main

    def check_writes_in(self, thread_kind: str) -> None:
        """``Forbidden`` when this caller may not write in a thread of this kind (Main's)."""
        if thread_kind == "main" and not self.writes_in_main:
            raise Forbidden(MAIN_FENCE)


MAIN_FENCE = ("Only Main's own agent may write in the Main thread: a token bound to it, or an "
              "unbound agent token made for it (maxclaw token create --role agent --for-main). "
              "This agent token is for the other threads.")


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
TICKET_TTL_S = 60.0
# a phone sign-in code: long enough to pick up a phone and scan, short enough that a code
# seen over a shoulder is soon worthless
SIGNIN_CODE_TTL_S = 300.0
WEB_MINT_FORBIDDEN_MAIN = (
    "Main's agent token is an operator action: run `maxclaw token create --user NAME --role "
    "agent --for-main` on the server. Connect an agent mints tokens for the other threads.")


def _principal(row: TokenPrincipalRow) -> Principal:
    return Principal(user_id=row.user_id, name=row.name,
                     role=cast(Role, row.role),  # the column's CHECK constraint
                     thread_id=row.thread_id, token_id=row.id, for_main=row.for_main,
                     expires_at=row.expires_at)


def token_projection(row: TokenRow, current: int | None = None) -> dict[str, Any]:
    """``GET /v1/tokens``: a token's facts, never the token or its hash."""
    out = {"id": row.id, "role": row.role, "thread_id": row.thread_id,
           "for_main": row.for_main, "created_at": row.created_at,
           "expires_at": row.expires_at, "last_used_at": row.last_used_at,
           "name": row.name, "thread_title": row.thread_title,
           "current": row.id == current}
    if isinstance(row, AccountTokenRow):
        out["user"] = row.user_name
    return out


class AuthService:
    """Users, tokens and authentication.

    Known tokens are cached in-process for ``TOKEN_CACHE_TTL_S`` (or until they expire):
    uncached, every request would pay one query (and a pool round trip). A revoke
    deletes the row and NOTIFYs ``maxclaw_token_revoked`` in the same transaction; every
    replica's ``RevocationListener`` calls ``forget``, which drops the token from the cache and
    closes its WebSockets at once. Unknown tokens are never cached, so a flood of bad tokens
    cannot grow the cache.
    """

    def __init__(self, db: Database, revocations: RevocationListener | None = None) -> None:
        self.db = db
        self._cache: dict[str, tuple[float, Principal]] = {}
        self._on_revoke: dict[int, set[Callable[[], None]]] = {}
        # the composition root gives the process's; a service built alone (tools, tests) hears
        # revokes on a LISTEN connection of its own, opened with its first authentication
        self.revocations = revocations or RevocationListener(Listener(db.listen_url))
        self.revocations.deliver_to(self.forget, self.forget_all)

    async def create_user(self, name: str) -> tuple[str, str]:
        """Create a user and its Main thread; returns ``(user_id, main_thread_id)``."""
        if not name.strip():
            raise Invalid.at(["name"], "a user needs a non-empty name")
        try:
            async with self.db.transaction() as conn:
                user = await store.insert_user(conn, name)
                main = await store.insert_main_thread(conn, user.id)
        except asyncpg.UniqueViolationError:
            raise Conflict(f"A user named {name!r} already exists.") from None
        return user.id, main

    async def create_token(self, user_name: str, role: Role, thread_id: str | None = None, *,
                           expires_at: datetime | None = None, for_main: bool = False) -> str:
        """Mint a token for ``user_name``; only its hash is stored. Returns the token once."""
        if role not in ("user", "agent"):
            raise Invalid.at(["role"], "role must be 'user' or 'agent'")
        if thread_id is not None and role != "agent":
            raise Invalid.at(["thread"], "only agent tokens can be bound to a thread")
        if for_main and (role != "agent" or thread_id is not None):
            raise Invalid.at(["for_main"], "only an unbound agent token can be flagged for Main")
        if expires_at is not None and expires_at.tzinfo is None:
            raise Invalid.at(["expires_at"], "expires_at needs a time zone")
        token = f"mc_{role[0]}_" + secrets.token_urlsafe(32)
        async with self.db.transaction() as conn:
            user = await store.user_by_name(conn, user_name)
            if user is None:
                raise NotFound(f"No user named {user_name!r}; "
                               "create it with `maxclaw user create`.")
            if thread_id is not None:
                thread_id = parse_uuid(thread_id)
                if await store.thread_owner(conn, thread_id) != user.id:
                    raise NotFound(f"User {user_name!r} has no thread {thread_id}.")
            await store.insert_token(conn, user.id, role, thread_id, hash_token(token),
                                     expires_at, for_main)
        return token

    async def mint_agent_token(self, who: Principal, thread_id: str | None, *,
                               new_thread_title: str | None = None, name: str | None,
                               expires_at: datetime | None) -> MintedToken:
        """``POST /v1/tokens`` (a signed-in user, e.g. the WebUI's "Connect an agent"): an
        agent token bound to one of the caller's threads, or to a new normal thread made in
        the same transaction, returned once. Another user's thread is 404 (as if absent);
        Main's thread is refused, because a token bound to it writes in Main, and Main's token
        stays an operator action."""
        who.require_role("user")
        if (thread_id is None) == (new_thread_title is None):
            raise Invalid.at(["body", "thread_id"], "send thread_id or new_thread (one of them)")
        bound = parse_uuid(thread_id) if thread_id is not None else None
        token = "mc_a_" + secrets.token_urlsafe(32)
        # a new thread's row carries a rev: its NOTIFY tells the user's other screens
        async with self.db.transaction(notify=bound is None) as conn:
            if bound is None:
                bound = await store.insert_agent_thread(conn, who.user_id, new_thread_title or "")
            else:
                await self._check_bindable(conn, who, bound)
            token_id = await store.insert_token(conn, who.user_id, "agent", bound,
                                                hash_token(token), expires_at, False, name)
        return MintedToken(token=token, id=token_id, role="agent", thread_id=bound,
                           name=name, expires_at=expires_at)

    @staticmethod
    async def _check_bindable(conn: asyncpg.Connection, who: Principal, thread_id: str) -> None:
        kind = await store.thread_kind(conn, who.user_id, thread_id)
        if kind is None:
            raise NotFound("No such thread.")
        if kind == "main":
            raise Forbidden(WEB_MINT_FORBIDDEN_MAIN)

    # ----- phone sign-in codes -----

    async def issue_signin_code(self, who: Principal) -> SigninCode:
        """``POST /v1/signin/codes``: a one-time code that signs another device in as the
        caller (single use, ``SIGNIN_CODE_TTL_S``, only its hash stored). Only a user token
        may make one: an agent must never be able to hand out its user's sign-in."""
        who.require_role("user")
        code = "mc_s_" + secrets.token_urlsafe(24)
        async with self.db.transaction(notify=False) as conn:
            expires = await store.insert_signin_code(conn, hash_token(code), who.user_id,
                                                     SIGNIN_CODE_TTL_S)
        return SigninCode(code=code, expires_at=expires)

    async def redeem_signin_code(self, code: str, device: str | None) -> MintedToken:
        """``POST /v1/signin/redeem``: use a sign-in code up and mint a new user token for the
        device in the same transaction. An unknown code is ``Unauthorized``; a used or expired
        one ``Conflict``; neither writes a row (the caller counts both toward the lockout)."""
        digest = hash_token(code.strip())
        token = "mc_u_" + secrets.token_urlsafe(32)
        async with self.db.transaction(notify=False) as conn:
            user = await store.redeem_signin_code(conn, digest)
            if user is not None:
                token_id = await store.insert_token(conn, user.id, "user", None,
                                                    hash_token(token), None, False, device)
        if user is None:
            raise await self._signin_refusal(digest)
        return MintedToken(token=token, id=token_id, role="user", name=device, user=user.name)

    async def _signin_refusal(self, digest: str) -> Unauthorized | Conflict:
        """Why a redemption found nothing: the words a person on the phone can act on."""
        async with self.db.connection() as conn:
            row = await store.signin_code(conn, digest)
        if row is None:
            return Unauthorized("Unknown sign-in code: make a new link on a signed-in browser "
                                "(Sign in on your phone).")
        if row.used_at is not None:
            return Conflict("This sign-in link was already used: each link signs in one "
                            "device once. Make a new one on a signed-in browser.")
        return Conflict("This sign-in link has expired (it lasts five minutes): make a new one "
                       "on a signed-in browser.")

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
            raise Unauthorized("Unknown or expired token.")
        principal = _principal(row)
        if not await self.revocations.ensure_listening():
            return principal  # a revoke would go unheard: do not cache
        if len(self._cache) >= TOKEN_CACHE_SIZE:
            self._cache.clear()  # crude but bounded; a refill costs one query per token
        ttl = TOKEN_CACHE_TTL_S
        if row.expires_at is not None:
            ttl = min(ttl, (row.expires_at - datetime.now(UTC)).total_seconds())
        self._cache[digest] = (now + ttl, principal)
        return principal

    # ----- listing and revoking -----

    async def list_tokens(self, who: Principal) -> Tokens:
        """The caller's user's tokens (``GET /v1/tokens``); ``current`` marks the caller's."""
        async with self.db.connection() as conn:
            rows = await store.list_tokens(conn, who.user_id)
        return Tokens(tokens=[Token.model_validate(token_projection(r, who.token_id))
                              for r in rows])

    async def revoke_token(self, who: Principal, token_id: str | int) -> None:
        """Delete one of the caller's user's tokens (another user's is 404)."""
        numeric = parse_int_id(token_id, "token")
        async with self.db.transaction(notify=False) as conn:
            if not await store.delete_token(conn, numeric, who.user_id):
                raise NotFound("No such token.")
        self.forget(numeric)  # this replica at once; the others through the NOTIFY

    async def list_all_tokens(self, user_name: str | None = None) -> list[dict[str, Any]]:
        """Every token, or one user's (``maxclaw token list``)."""
        async with self.db.connection() as conn:
            rows = await store.list_all_tokens(conn, user_name)
        return [token_projection(r) for r in rows]

    async def revoke_any(self, token_id: int) -> bool:
        """``maxclaw token revoke ID``: delete any token by id; False if there was none."""
        async with self.db.transaction(notify=False) as conn:
            gone = await store.delete_token(conn, token_id, None)
        self.forget(token_id)
        return gone

    async def revoke_by_token(self, token: str) -> int | None:
        """``maxclaw token revoke --token TOKEN``: delete the token itself (an operator holding a
        leaked token need not look its id up); its id, or None if it is unknown."""
        async with self.db.transaction(notify=False) as conn:
            token_id = await store.token_id_by_hash(conn, hash_token(token.strip()))
            if token_id is None or not await store.delete_token(conn, token_id, None):
                return None
        self.forget(token_id)
        return token_id

    def forget(self, token_id: int) -> None:
        """A token was revoked: drop it from the cache and close its WebSockets."""
        for digest in [d for d, (_, p) in self._cache.items() if p.token_id == token_id]:
            self._cache.pop(digest, None)
        for close in list(self._on_revoke.pop(token_id, ())):
            close()

    def forget_all(self) -> None:
        """Revocations may have been missed (the listener reconnected): trust nothing cached."""
        self._cache.clear()

    def on_revoke(self, who: Principal, close: Callable[[], None]) -> Callable[[], None]:
        """Call ``close`` when ``who``'s token is revoked; returns the unregister function."""
        if who.token_id is None:
            return lambda: None
        token_id = who.token_id
        self._on_revoke.setdefault(token_id, set()).add(close)

        def unregister() -> None:
            watchers = self._on_revoke.get(token_id)
            if watchers is not None:
                watchers.discard(close)
                if not watchers:
                    self._on_revoke.pop(token_id, None)
        return unregister

    # ----- WebSocket tickets -----

    async def issue_ticket(self, who: Principal) -> Ticket:
        """``POST /v1/ws-ticket``: a single-use ticket for ``/v1/ws?ticket=``, valid for
        ``TICKET_TTL_S``, so the long-lived token never travels in a URL."""
        if who.token_id is None:
            raise Unauthorized("A ticket needs a token.")
        ticket = "mc_k_" + secrets.token_urlsafe(32)
        async with self.db.transaction(notify=False) as conn:
            expires = await store.insert_ticket(conn, hash_token(ticket), who.token_id,
                                                who.user_id, TICKET_TTL_S)
        return Ticket(ticket=ticket, expires_at=expires)

    async def redeem_ticket(self, ticket: str | None) -> Principal:
        """The principal a ticket was issued to; the ticket is used up. ``Unauthorized`` when
        it is unknown, used or expired."""
        if not ticket:
            raise Unauthorized("Missing ticket.")
        async with self.db.transaction(notify=False) as conn:
            row = await store.redeem_ticket(conn, hash_token(ticket))
        if row is None:
            raise Unauthorized("Unknown, used or expired ticket.")
        return _principal(row)

    async def main_thread_id(self, user_id: str) -> str | None:
        async with self.db.connection() as conn:
            return await store.main_thread_of(conn, user_id)
