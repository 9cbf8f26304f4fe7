"""SQL for push action tokens (``action_tokens.py`` has the rules).

Tokens are found by the SHA-256 of the token a device sends; that lookup is the one query here
without a ``user_id`` (the token is the credential that names the user, as a bearer token's
hash does in ``auth``). Every write carries the user id the token was found under.
"""

from __future__ import annotations

from datetime import datetime

import asyncpg

from maxclaw.push.rows import ActionTokenRow

MINT = """
INSERT INTO push_action_tokens (user_id, decision_id, device_id, token_hash, created_at,
                                expires_at, scope)
VALUES ($1, $2, $3, $4, $5, $6, $7)
RETURNING id
"""

# the token with its decision's state (the decision must be the user's: the join says so)
FIND = """
SELECT t.id, t.user_id::text, t.decision_id, t.device_id, t.expires_at, t.used_at, t.revoked_at,
       t.scope, d.status AS decision_status, d.settled_via, d.component_id
FROM push_action_tokens AS t
JOIN decisions AS d ON d.id = t.decision_id AND d.user_id = t.user_id
WHERE t.token_hash = $1
"""

# single use: the first caller wins; run inside the transaction that answers the card, so a
# refused answer rolls the use back and nothing is written
CONSUME = """
UPDATE push_action_tokens SET used_at = $3
WHERE id = $1 AND user_id = $2 AND used_at IS NULL AND revoked_at IS NULL AND expires_at > $3
RETURNING id
"""

REVOKE_FOR_DECISION = """
UPDATE push_action_tokens SET revoked_at = now()
WHERE decision_id = $1 AND user_id = $2 AND used_at IS NULL AND revoked_at IS NULL
"""


async def mint(conn: asyncpg.Connection, *, user_id: str, decision_id: int, device_id: int,
               token_hash: bytes, now: datetime, expires_at: datetime,
               scope: str = "answer") -> int:
    """Store a new token's hash (``scope``: ``answer``, ``revoke`` or ``retract``); returns
    its id."""
    return int(await conn.fetchval(MINT, user_id, decision_id, device_id, token_hash, now,
                                   expires_at, scope))


async def find(conn: asyncpg.Connection, token_hash: bytes) -> ActionTokenRow | None:
    """The token (with its decision's status and component), or None."""
    row = await conn.fetchrow(FIND, token_hash)
    return ActionTokenRow.from_record(row) if row else None


async def consume(conn: asyncpg.Connection, *, token_id: int, user_id: str,
                  now: datetime) -> bool:
    """Mark the token used; False when it was used, revoked or expired meanwhile."""
    return await conn.fetchval(CONSUME, token_id, user_id, now) is not None


async def revoke_for_decision(conn: asyncpg.Connection, *, user_id: str,
                              decision_id: int) -> None:
    """Revoke the decision's unused tokens (it reopened: old notifications must not answer)."""
    await conn.execute(REVOKE_FOR_DECISION, decision_id, user_id)
