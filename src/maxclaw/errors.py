"""The service's own errors; one exception handler maps them to ``api.md``'s error body.

    MaxclawError (code, http_status)
    ├── BadRequest        400 bad_request
    ├── Unauthorized      401 unauthorized
    ├── Forbidden         403 forbidden
    ├── NotFound          404 not_found
    ├── ComponentError    409 settled | locked | not_transferable | irreversible | conflict
    │                                 | withdrawn | expired | seen | too_late
    ├── Conflict          409 conflict
    │   └── TurnStopped   409 turn_stopped (Max stopped the turn: the runtime ends its loop)
    ├── TooLarge          413 too_large
    ├── Invalid           422 invalid   (data.errors = [{"loc": [...], "msg": ...}])
    ├── RateLimited       429 rate_limited (data.retry_after_s, also Retry-After; data.limit)
    └── Unavailable       503 unavailable (the database is down; retry)
"""

from __future__ import annotations

from typing import Any, ClassVar


class MaxclawError(Exception):
    """Base of every error the service reports to a caller."""

    code: ClassVar[str] = "internal"
    http_status: ClassVar[int] = 500

    def __init__(self, message: str, *, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.data: dict[str, Any] = data or {}

    def body(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "data": self.data}


class BadRequest(MaxclawError):
    code = "bad_request"
    http_status = 400


class Unauthorized(MaxclawError):
    code = "unauthorized"
    http_status = 401


class Forbidden(MaxclawError):
    code = "forbidden"
    http_status = 403


class NotFound(MaxclawError):
    code = "not_found"
    http_status = 404


class Conflict(MaxclawError):
    code = "conflict"
    http_status = 409


class TurnStopped(Conflict):
    """A write of a turn Max stopped: the runtime stops its loop and writes nothing more."""

    code = "turn_stopped"


class RateLimited(MaxclawError):
    """A quota is used up; ``retry_after_s`` (whole seconds, at least 1) says when to try again
    and ``limit`` is the quota that was hit (``data.limit``: a client can size itself to it)."""

    code = "rate_limited"
    http_status = 429

    def __init__(self, message: str, *, retry_after_s: float, limit: int) -> None:
        self.retry_after_s = max(1, int(-(-retry_after_s // 1)))
        self.limit = limit
        super().__init__(message, data={"retry_after_s": self.retry_after_s, "limit": limit})


class ComponentError(MaxclawError):
    """A component transition that lost a race or is not allowed from the current state."""

    http_status = 409
    MESSAGES: ClassVar[dict[str, str]] = {
        "settled": "This question was already answered elsewhere; nothing was changed.",
        "locked": "This question is with Main; answer it from the decisions panel or a push.",
        "not_transferable": "Main may not take this question; only Max can answer it.",
        "irreversible": (
            "Guessing wrong here cannot be undone; it can't be answered on his behalf. "
            "Hand it back."
        ),
        "conflict": "This question is not in a state that allows that.",
        "withdrawn": "The agent withdrew this question; nothing was changed.",
        "expired": "This question expired unanswered; nothing was changed.",
        "seen": ("The agent has already seen this answer; it can no longer be taken back. "
                 "Send a correction as a message instead."),
        "too_late": "The time to take this answer back has passed; send a correction instead.",
    }

    def __init__(
        self, reason: str, message: str | None = None, *, data: dict[str, Any] | None = None
    ) -> None:
        if reason not in self.MESSAGES:
            raise ValueError(f"unknown ComponentError reason {reason!r}")
        super().__init__(message or self.MESSAGES[reason], data=data)
        self.reason = reason

    def body(self) -> dict[str, Any]:
        return {"code": self.reason, "message": self.message, "data": self.data}


class TooLarge(MaxclawError):
    code = "too_large"
    http_status = 413


class Invalid(MaxclawError):
    code = "invalid"
    http_status = 422

    def __init__(self, message: str, errors: list[dict[str, Any]]) -> None:
        super().__init__(message, data={"errors": errors})
        self.errors = errors

    @classmethod
    def at(cls, loc: list[str | int], msg: str) -> Invalid:
        """One error at one field path."""
        path = ".".join(str(p) for p in loc)
        return cls(f"{path}: {msg}" if path else msg, [{"loc": loc, "msg": msg}])


class Unavailable(MaxclawError):
    code = "unavailable"
    http_status = 503
