"""SQL for users and tokens. Only a SHA-256 of each token is stored."""

from __future__ import annotations

from typing import Any

import asyncpg

INSERT_USER = "INSERT INTO users (name) VALUES ($1) RETURNING id::text, name, created_at"
INSERT_MAIN_THREAD = """
INSERT INTO threads (user_id, kind, title) VALUES ($1::uuid, 'main', 'Main')
RETURNING id::text
"""
USER_BY_NAME = "SELECT id::text, name FROM users WHERE name = $1"
MAIN_THREAD_OF = "SELECT id::text FROM threads WHERE user_id = $1::uuid AND kind = 'main'"
INSERT_TOKEN = """
INSERT INTO api_tokens (user_id, role, thread_id, token_hash)
VALUES ($1::uuid, $2, $3::uuid, $4) RETURNING id
"""
PRINCIPAL_BY_HASH = """
SELECT t.user_id::text, t.role, t.thread_id::text, u.name
  FROM api_tokens t JOIN users u ON u.id = t.user_id
 WHERE t.token_hash = $1
"""
THREAD_OWNER = "SELECT user_id::text FROM threads WHERE id = $1::uuid"


async def insert_user(conn: asyncpg.Connection, name: str) -> dict[str, Any]:
    """Create a user row."""
    return dict(await conn.fetchrow(INSERT_USER, name))


async def insert_main_thread(conn: asyncpg.Connection, user_id: str) -> str:
    """Create the user's one Main thread."""
    return str(await conn.fetchval(INSERT_MAIN_THREAD, user_id))


async def user_by_name(conn: asyncpg.Connection, name: str) -> dict[str, Any] | None:
    row = await conn.fetchrow(USER_BY_NAME, name)
    return dict(row) if row else None


async def main_thread_of(conn: asyncpg.Connection, user_id: str) -> str | None:
    value = await conn.fetchval(MAIN_THREAD_OF, user_id)
    return str(value) if value else None


async def insert_token(conn: asyncpg.Connection, user_id: str, role: str,
                       thread_id: str | None, token_hash: str) -> int:
    """Store a token's hash with its role and optional thread binding."""
    return int(await conn.fetchval(INSERT_TOKEN, user_id, role, thread_id, token_hash))


async def principal_by_hash(conn: asyncpg.Connection, token_hash: str) -> dict[str, Any] | None:
    row = await conn.fetchrow(PRINCIPAL_BY_HASH, token_hash)
    return dict(row) if row else None


async def thread_owner(conn: asyncpg.Connection, thread_id: str) -> str | None:
    value = await conn.fetchval(THREAD_OWNER, thread_id)
    return str(value) if value else None
