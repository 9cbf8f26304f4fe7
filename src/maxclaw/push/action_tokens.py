"""Action tokens: what a notification's buttons answer with, so no device holds a bearer token.

Every notification sent to a Web Push, APNs or webhook device carries a fresh ``action_token``
(a webhook-driven bridge, a chat bot or a pager, answers with it instead of Max's bearer token),
minted when the push is sent (never stored in the outbox: the table keeps only its SHA-256). It is
scoped to one decision and one device, answers once, is refused once the decision settles
(``409 settled``, however it settled), is revoked when the decision reopens, and expires after
``ACTION_TOKEN_TTL`` in any case. ``POST /v1/push/actions`` with ``{"action_token", "action",
"text"}`` answers without a bearer token. A secret question's notification carries no token:
a secret is typed only inside the app.

A token has a scope: ``answer`` for a question's buttons, ``revoke`` for the Revoke button of
"Main answered … for you" (``action: "revoke"``), ``retract`` for the "Take back" button of the
notification that confirms an answer given from a notification (``action: "retract"``). A
revoke token works while the decision is settled by Main's answer; the revoke transition's CAS
decides the rest (``409 conflict`` when the card is no longer ``main-answered``), and it is
spent like an answer token: once.

A retract token is never pushed: it is minted in the transaction of the answer an answer token
gave, for the same user, decision and device, and returned in that answer's response
(``take_back``), where the service worker (or an app's notification extension) puts it on the
confirmation. The retract transition judges its use (``409 seen``, ``409 too_late`` once the
window closed, ...); it answers once, and lives a day past the window so that a late tap hears
``too_late`` rather than "expired".

Refusals (nothing is written for any of them):
- ``401 unauthorized``, ``data.reason``: ``action_token_unknown`` (never issued, or its device
  was removed), ``action_token_expired``, ``action_token_stale`` (the decision reopened since),
  ``action_token_other_decision`` (the body names another decision than the token's),
  ``action_token_scope`` (a question's token sent with ``revoke``, or a revoke token with an
  answer).
- ``409 settled``: the decision is settled; ``data.reason`` is ``action_token_used`` when this
  token answered it (a replay), ``decision_settled`` otherwise.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import replace
from datetime import timedelta
from typing import Any

import asyncpg

from maxclaw.auth.service import Principal
from maxclaw.clock import Clock
from maxclaw.db.database import Database
from maxclaw.errors import ComponentError, Unauthorized
from maxclaw.push import action_token_store as store
from maxclaw.push.adapters.base import Adapter, Delivery
from maxclaw.push.payload import TAKE_BACK_CATEGORY
from maxclaw.push.rows import ActionTokenRow

TOKEN_PREFIX = "mcpa_"
ACTION_TOKEN_TTL = timedelta(days=31)  # longer than any question may stay open (30 days)
# the platforms whose notifications carry buttons a device answers with (never ``log``: its
# payloads are written to the server's log, and a token there would be a credential in a log)
TOKEN_PLATFORMS = ("webpush", "apns", "webhook")
# the notifications whose buttons act with a token, and what their token may do
SCOPES = {"agent-question": "answer", "main-answered": "revoke"}
RETRACT_SCOPE = "retract"  # "Take back" on the confirmation of an answer (never pushed)
TAKE_BACK_GRACE = timedelta(days=1)  # a retract token outlives the window by this


def new_token() -> tuple[str, bytes]:
    """A fresh token and the hash that is stored for it."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    return token, hash_token(token)


def hash_token(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def wants_token(delivery: Delivery) -> bool:
    """A notification of an open question, or of Main's answer (its Revoke button), not a
    secret one (a secret opens the app)."""
    payload = delivery.payload
    return (delivery.kind == "notify" and delivery.decision_id is not None
            and payload.get("kind") in SCOPES and not payload.get("secret"))


class TokenStampingAdapter:
    """Wraps an adapter: each notification it sends gets a token minted for its device.

    Minted at send time, per attempt, so the token exists only in the push in flight; a retry
    carries a new one (an unused earlier one harms nothing and dies with the decision).
    """

    def __init__(self, inner: Adapter, db: Database, clock: Clock) -> None:
        self.inner = inner
        self.platform = inner.platform
        self.db = db
        self.clock = clock

    async def send(self, delivery: Delivery) -> None:
        if wants_token(delivery):
            token = await self.mint(delivery)
            delivery = replace(delivery, payload={**delivery.payload, "action_token": token})
        await self.inner.send(delivery)

    async def mint(self, delivery: Delivery) -> str:
        token, digest = new_token()
        now = self.clock.now()
        assert delivery.decision_id is not None  # wants_token checked it
        async with self.db.connection() as conn:
            await store.mint(conn, user_id=delivery.user_id, decision_id=delivery.decision_id,
                             device_id=delivery.device_id, token_hash=digest, now=now,
                             expires_at=now + ACTION_TOKEN_TTL,
                             scope=SCOPES[str(delivery.payload["kind"])])
        return token

    async def close(self) -> None:
        await self.inner.close()


def stamp_adapters(adapters: dict[str, Adapter], db: Database,
                   clock: Clock) -> dict[str, Adapter]:
    """The adapters with token stamping on the platforms whose buttons use it."""
    return {name: (TokenStampingAdapter(a, db, clock) if name in TOKEN_PLATFORMS else a)
            for name, a in adapters.items()}


def _refused(reason: str, message: str) -> Unauthorized:
    return Unauthorized(message, data={"reason": reason})


class ActionTokens:
    """Checks a token and returns who it acts for and the guard that spends it."""

    def __init__(self, db: Database, clock: Clock) -> None:
        self.db = db
        self.clock = clock

    async def check(self, token: str, decision_id: int | None,
                    scope: str = "answer") -> tuple[Principal, int, Any]:
        """``(principal, decision id, guard)`` for a usable token, else the refusal.
        ``scope``: what the request does with it (``answer``, ``revoke`` or ``retract``).

        ``guard(conn)`` spends the token inside the answer's transaction; if another use won
        meanwhile it raises ``409 settled`` and the answer rolls back with it.
        """
        row, guard = await self._check(token, decision_id, scope)
        return self._principal(row), row.decision_id, guard

    async def check_with_take_back(self, token: str, decision_id: int | None,
                                   window: timedelta) -> tuple[Principal, int, Any,
                                                                dict[str, Any]]:
        """An answer token's check whose guard also mints the ``retract`` token of the
        confirmation, in the answer's transaction (a refused answer mints nothing). The
        returned dict is filled by the guard: ``{"action_token", "action", "until",
        "category"}`` (the APNs category of the app's confirmation); it
        stays empty when the window is zero (no take back)."""
        row, spend = await self._check(token, decision_id, "answer")
        minted: dict[str, Any] = {}

        async def guard(conn: asyncpg.Connection) -> None:
            await spend(conn)
            if window <= timedelta(0):
                return
            retract, digest = new_token()
            now = self.clock.now()
            await store.mint(conn, user_id=row.user_id, decision_id=row.decision_id,
                             device_id=row.device_id, token_hash=digest, now=now,
                             expires_at=now + window + TAKE_BACK_GRACE, scope=RETRACT_SCOPE)
            minted.update(action_token=retract, action=RETRACT_SCOPE, until=now + window,
                          category=TAKE_BACK_CATEGORY)

        return self._principal(row), row.decision_id, guard, minted

    @staticmethod
    def _principal(row: ActionTokenRow) -> Principal:
        return Principal(user_id=row.user_id, name="push action", role="user")

    async def _check(self, token: str, decision_id: int | None,
                     scope: str) -> tuple[ActionTokenRow, Any]:
        row = None
        if token.startswith(TOKEN_PREFIX) and len(token) <= 200:
            async with self.db.connection() as conn:
                row = await store.find(conn, hash_token(token))
        if row is None:
            raise _refused("action_token_unknown",
                           "This action token is not valid (unknown, or its device was "
                           "removed). Open MaxClaw to answer.")
        if decision_id is not None and decision_id != row.decision_id:
            raise _refused("action_token_other_decision",
                           "This action token belongs to another decision.")
        if row.scope != scope:
            raise _refused("action_token_scope",
                           f"This notification's token cannot {scope}. Open MaxClaw to do it.")
        if row.used_at is not None:
            raise ComponentError("settled", "This notification was already used; "
                                 "nothing was changed.", data={"reason": "action_token_used"})
        # a revoke token acts on a settled decision (Main's answer), a retract token on Max's
        # answer: their transitions' CAS judges them
        if scope == "answer" and row.decision_status != "open":
            raise ComponentError("settled", data={"reason": "decision_settled",
                                                  "settled_via": row.settled_via})
        if row.revoked_at is not None:
            raise _refused("action_token_stale", "This notification is out of date (the "
                           "question was reopened). Open MaxClaw to answer.")
        if row.expires_at <= self.clock.now():
            raise _refused("action_token_expired", "This action token has expired. Open "
                           "MaxClaw to answer.")
        user_id = row.user_id
        token_id = row.id

        async def guard(conn: asyncpg.Connection) -> None:
            if not await store.consume(conn, token_id=token_id, user_id=user_id,
                                       now=self.clock.now()):
                raise ComponentError("settled", "This notification was already used; "
                                     "nothing was changed.", data={"reason": "action_token_used"})

        return row, guard
