"""Typed errors, as a tree (as httpx has one):

    MaxClawError
    ├── TransportError            the server could not be reached (wraps httpx's error)
    └── APIError                  the server answered {"code", "message", "data"}
        ├── BadRequestError       400
        ├── AuthenticationError   401: a wrong, revoked or expired token
        ├── PermissionDeniedError 403: a user token, or a tool not offered in this thread
        ├── NotFoundError         404: no such thread, card or call (for this token)
        ├── ConflictError         409: already settled, stale turn, …
        ├── InvalidError          422: the arguments are wrong (``data`` says where)
        ├── RateLimitedError      429: ``retry_after_s`` says when to try again
        └── UnavailableError      503: the database is away; retry later
"""

from __future__ import annotations

from typing import Any


class MaxClawError(Exception):
    """Every error this library raises."""


class TransportError(MaxClawError):
    """The request did not get an answer (connection refused, timeout, …)."""


class APIError(MaxClawError):
    """An error answer of the MaxClaw API."""

    status = 0

    def __init__(self, status: int, code: str, message: str,
                 data: dict[str, Any] | None = None, body: dict[str, Any] | None = None,
                 retry_after_s: float | None = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.data = data or {}
        self.body = body or {}
        self.retry_after_s = retry_after_s


class BadRequestError(APIError):
    status = 400


class AuthenticationError(APIError):
    status = 401


class PermissionDeniedError(APIError):
    status = 403


class NotFoundError(APIError):
    status = 404


class ConflictError(APIError):
    status = 409


class InvalidError(APIError):
    status = 422


class RateLimitedError(APIError):
    status = 429


class UnavailableError(APIError):
    status = 503


BY_STATUS: dict[int, type[APIError]] = {cls.status: cls for cls in (
    BadRequestError, AuthenticationError, PermissionDeniedError, NotFoundError, ConflictError,
    InvalidError, RateLimitedError, UnavailableError)}


def error_for(status: int, body: Any, reason: str,
              retry_after: str | None = None) -> APIError:
    """The typed error for an error answer."""
    body = body if isinstance(body, dict) else {}
    cls = BY_STATUS.get(status, APIError)
    try:
        retry_after_s = float(retry_after) if retry_after is not None else None
    except ValueError:
        retry_after_s = None
    data = body.get("data")
    return cls(status, str(body.get("code", "http_error")), str(body.get("message", reason)),
               data if isinstance(data, dict) else {}, body, retry_after_s)
