"""SQL for users and tokens. Only a SHA-256 of each token is stored."""

from __future__ import annotations

from datetime import datetime

import asyncpg

from maxclaw.auth.rows import (
    AccountTokenRow,
    SigninCodeRow,
    TokenPrincipalRow,
    TokenRow,
    UserRow,
)

INSERT_USER = "INSERT INTO users (name) VALUES ($1) RETURNING id::text, name, created_at"
INSERT_MAIN_THREAD = """
INSERT INTO threads (user_id, kind, title) VALUES ($1::uuid, 'main', 'Main')
RETURNING id::text
"""
# a thread made for a token minted in the WebUI ("Connect an agent": a new thread)
INSERT_AGENT_THREAD = """
INSERT INTO threads (user_id, kind, title) VALUES ($1::uuid, 'normal', $2) RETURNING id::text
"""
USER_BY_NAME = "SELECT id::text, name, created_at FROM users WHERE name = $1"
MAIN_THREAD_OF = "SELECT id::text FROM threads WHERE user_id = $1::uuid AND kind = 'main'"
INSERT_TOKEN = """
INSERT INTO api_tokens (user_id, role, thread_id, token_hash, expires_at, for_main, name)
VALUES ($1::uuid, $2, $3::uuid, $4, $5, $6, $7) RETURNING id
"""
# An expired token is refused like a deleted one. last_used_at is stamped here, i.e. when a
# replica (re)reads the token: to within the cache's lifetime, and at most once a minute.
PRINCIPAL_BY_HASH = """
WITH t AS (
    SELECT t.id, t.user_id, t.role, t.thread_id, t.expires_at, t.for_main, t.last_used_at,
           u.name
      FROM api_tokens t JOIN users u ON u.id = t.user_id
     WHERE t.token_hash = $1 AND (t.expires_at IS NULL OR t.expires_at > now())
), stamp AS (
    UPDATE api_tokens a SET last_used_at = now() FROM t
     WHERE a.user_id = t.user_id AND a.id = t.id
       AND (t.last_used_at IS NULL OR t.last_used_at < now() - interval '1 minute')
)
SELECT id, user_id::text, role, thread_id::text, expires_at, for_main, name FROM t
"""
TOKEN_COLUMNS = """t.id, t.role, t.thread_id::text, t.for_main, t.created_at, t.expires_at,
       t.last_used_at, t.name, th.title AS thread_title"""
# a bound token's thread joins for its title (same user: the key leads with user_id)
LIST_TOKENS = f"""
SELECT {TOKEN_COLUMNS}
  FROM api_tokens t LEFT JOIN threads th ON th.user_id = t.user_id AND th.id = t.thread_id
 WHERE t.user_id = $1::uuid ORDER BY t.id
"""
LIST_ALL_TOKENS = f"""
SELECT {TOKEN_COLUMNS}, u.name AS user_name
  FROM api_tokens t JOIN users u ON u.id = t.user_id
  LEFT JOIN threads th ON th.user_id = t.user_id AND th.id = t.thread_id
 WHERE $1::text IS NULL OR u.name = $1 ORDER BY t.id
"""
# the revoke and its NOTIFY commit together: every replica drops the token from its cache
DELETE_TOKEN = """
WITH gone AS (
    DELETE FROM api_tokens WHERE id = $1 AND ($2::uuid IS NULL OR user_id = $2::uuid)
    RETURNING id
)
SELECT id, pg_notify('maxclaw_token_revoked', id::text) FROM gone
"""
TOKEN_ID_BY_HASH = "SELECT id FROM api_tokens WHERE token_hash = $1"
INSERT_TICKET = """
INSERT INTO ws_tickets (ticket_hash, token_id, user_id, expires_at)
VALUES ($1, $2, $3::uuid, now() + make_interval(secs => $4)) RETURNING expires_at
"""
# single use: the DELETE is the redemption; a ticket past its time is refused (and swept)
REDEEM_TICKET = """
WITH used AS (
    DELETE FROM ws_tickets WHERE ticket_hash = $1 RETURNING user_id, token_id, expires_at
), swept AS (
    DELETE FROM ws_tickets WHERE expires_at < now() - interval '1 minute'
)
SELECT t.id, t.user_id::text, t.role, t.thread_id::text, t.expires_at, t.for_main, u.name
  FROM used JOIN api_tokens t ON t.user_id = used.user_id AND t.id = used.token_id
  JOIN users u ON u.id = t.user_id
 WHERE used.expires_at > now() AND (t.expires_at IS NULL OR t.expires_at > now())
"""
THREAD_OWNER = "SELECT user_id::text FROM threads WHERE id = $1::uuid"
THREAD_KIND = "SELECT kind FROM threads WHERE user_id = $1::uuid AND id = $2::uuid"
# codes a day past their time are swept by each new one too (none is redeemed for long)
INSERT_SIGNIN_CODE = """
WITH swept AS (
    DELETE FROM signin_codes WHERE expires_at < now() - interval '1 day'
)
INSERT INTO signin_codes (code_hash, user_id, expires_at)
VALUES ($1, $2::uuid, now() + make_interval(secs => $3)) RETURNING expires_at
"""
# single use: the CAS sets used_at once, and only on a code still in its lifetime; codes well
# past their time are swept here (a used one is kept until then, so a replay reads "used")
REDEEM_SIGNIN_CODE = """
WITH used AS (
    UPDATE signin_codes SET used_at = now()
     WHERE code_hash = $1 AND used_at IS NULL AND expires_at > now()
    RETURNING user_id
), swept AS (
    DELETE FROM signin_codes WHERE expires_at < now() - interval '1 day'
)
SELECT u.id::text, u.name, u.created_at FROM used JOIN users u ON u.id = used.user_id
"""
SIGNIN_CODE = "SELECT user_id::text, expires_at, used_at FROM signin_codes WHERE code_hash = $1"


async def insert_user(conn: asyncpg.Connection, name: str) -> UserRow:
    """Create a user row."""
    return UserRow.from_record(await conn.fetchrow(INSERT_USER, name))


async def insert_main_thread(conn: asyncpg.Connection, user_id: str) -> str:
    """Create the user's one Main thread."""
    return str(await conn.fetchval(INSERT_MAIN_THREAD, user_id))


async def insert_agent_thread(conn: asyncpg.Connection, user_id: str, title: str) -> str:
    """A normal thread for the user, made with the token bound to it."""
    return str(await conn.fetchval(INSERT_AGENT_THREAD, user_id, title))


async def user_by_name(conn: asyncpg.Connection, name: str) -> UserRow | None:
    row = await conn.fetchrow(USER_BY_NAME, name)
    return UserRow.from_record(row) if row else None


async def main_thread_of(conn: asyncpg.Connection, user_id: str) -> str | None:
    value = await conn.fetchval(MAIN_THREAD_OF, user_id)
    return str(value) if value else None


async def insert_token(conn: asyncpg.Connection, user_id: str, role: str,
                       thread_id: str | None, token_hash: str, expires_at: datetime | None = None,
                       for_main: bool = False, name: str | None = None) -> int:
    """Store a token's hash with its role, optional thread binding, expiry and Main flag."""
    return int(await conn.fetchval(INSERT_TOKEN, user_id, role, thread_id, token_hash,
                                   expires_at, for_main, name))


async def list_tokens(conn: asyncpg.Connection, user_id: str) -> list[TokenRow]:
    return [TokenRow.from_record(r) for r in await conn.fetch(LIST_TOKENS, user_id)]


async def list_all_tokens(conn: asyncpg.Connection,
                          user_name: str | None) -> list[AccountTokenRow]:
    return [AccountTokenRow.from_record(r) for r in await conn.fetch(LIST_ALL_TOKENS, user_name)]


async def delete_token(conn: asyncpg.Connection, token_id: int, user_id: str | None) -> bool:
    """Delete a token (the user's own when ``user_id`` is given) and NOTIFY the replicas."""
    return await conn.fetchrow(DELETE_TOKEN, token_id, user_id) is not None


async def token_id_by_hash(conn: asyncpg.Connection, token_hash: str) -> int | None:
    """The id of the token with this hash (expired or not), or None."""
    value: int | None = await conn.fetchval(TOKEN_ID_BY_HASH, token_hash)
    return value


async def insert_ticket(conn: asyncpg.Connection, ticket_hash: str, token_id: int, user_id: str,
                        ttl_s: float) -> datetime:
    value: datetime = await conn.fetchval(INSERT_TICKET, ticket_hash, token_id, user_id, ttl_s)
    return value


async def redeem_ticket(conn: asyncpg.Connection, ticket_hash: str) -> TokenPrincipalRow | None:
    row = await conn.fetchrow(REDEEM_TICKET, ticket_hash)
    return TokenPrincipalRow.from_record(row) if row else None


async def principal_by_hash(conn: asyncpg.Connection,
                            token_hash: str) -> TokenPrincipalRow | None:
    row = await conn.fetchrow(PRINCIPAL_BY_HASH, token_hash)
    return TokenPrincipalRow.from_record(row) if row else None


async def thread_owner(conn: asyncpg.Connection, thread_id: str) -> str | None:
    value = await conn.fetchval(THREAD_OWNER, thread_id)
    return str(value) if value else None


async def thread_kind(conn: asyncpg.Connection, user_id: str, thread_id: str) -> str | None:
    """The kind of one of the user's threads, or None when he has no such thread."""
    value = await conn.fetchval(THREAD_KIND, user_id, thread_id)
    return str(value) if value else None


async def insert_signin_code(conn: asyncpg.Connection, code_hash: str, user_id: str,
                             ttl_s: float) -> datetime:
    value: datetime = await conn.fetchval(INSERT_SIGNIN_CODE, code_hash, user_id, ttl_s)
    return value


async def redeem_signin_code(conn: asyncpg.Connection, code_hash: str) -> UserRow | None:
    """The code's user when this call used it up; None when it is unknown, used or expired."""
    row = await conn.fetchrow(REDEEM_SIGNIN_CODE, code_hash)
    return UserRow.from_record(row) if row else None


async def signin_code(conn: asyncpg.Connection, code_hash: str) -> SigninCodeRow | None:
    row = await conn.fetchrow(SIGNIN_CODE, code_hash)
    return SigninCodeRow.from_record(row) if row else None
