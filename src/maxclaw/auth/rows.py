"""The rows ``auth.store`` returns (see ``maxclaw.db.rows``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from maxclaw.db.rows import Row


@dataclass(frozen=True, slots=True)
class UserRow(Row):
    id: str
    name: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class TokenPrincipalRow(Row):
    """A live token with its user's name: what a request authenticates as."""

    id: int
    user_id: str
    role: str  # user | agent (the column's CHECK constraint)
    thread_id: str | None  # an agent token bound to one thread
    expires_at: datetime | None
    for_main: bool
    name: str  # the user's


@dataclass(frozen=True, slots=True)
class TokenRow(Row):
    """A token's facts for listing (never the token or its hash)."""

    id: int
    role: str
    thread_id: str | None
    for_main: bool
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None
    name: str | None  # what the person called it (WebUI mints); None for the CLI's
    thread_title: str | None  # the bound thread's title


@dataclass(frozen=True, slots=True)
class AccountTokenRow(TokenRow):
    """A token listed across users (``maxclaw token list``): with its user's name."""

    user_name: str


@dataclass(frozen=True, slots=True)
class SigninCodeRow(Row):
    """A sign-in code's state, looked up after a refused redemption to say why."""

    user_id: str
    expires_at: datetime
    used_at: datetime | None
