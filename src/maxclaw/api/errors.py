"""One place that turns exceptions into ``api.md``'s error body."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from maxclaw.db.database import is_connection_error
from maxclaw.errors import MaxclawError, RateLimited

log = logging.getLogger("maxclaw.api")

_HTTP_CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
               405: "not_found", 409: "conflict", 413: "too_large", 422: "invalid",
               429: "rate_limited",
               503: "unavailable"}


def error_response(status: int, code: str, message: str,
                   data: dict[str, Any] | None = None) -> JSONResponse:
    return JSONResponse({"code": code, "message": message, "data": data or {}}, status_code=status)


def _validation_errors(exc: RequestValidationError) -> list[dict[str, Any]]:
    return [{"loc": list(e.get("loc", [])), "msg": str(e.get("msg", ""))} for e in exc.errors()]


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(MaxclawError)
    async def _domain(_: Request, exc: MaxclawError) -> JSONResponse:
        headers = ({"Retry-After": str(exc.retry_after_s)} if isinstance(exc, RateLimited)
                   else None)
        return JSONResponse(exc.body(), status_code=exc.http_status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = _validation_errors(exc)
        if any(e.get("type") == "json_invalid" for e in exc.errors()):
            return error_response(400, "bad_request", "The body is not valid JSON.")
        first = errors[0] if errors else {"loc": [], "msg": "invalid request"}
        path = ".".join(str(p) for p in first["loc"])
        return error_response(422, "invalid", f"{path}: {first['msg']}", {"errors": errors})

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        status = exc.status_code if exc.status_code != 405 else 404
        code = _HTTP_CODES.get(exc.status_code, "bad_request")
        message = exc.detail if isinstance(exc.detail, str) else "Request refused."
        return error_response(status, code, message)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        if isinstance(exc, RecursionError):  # the body parser gave up on absurd nesting
            return error_response(400, "bad_request", "The JSON body is nested too deeply.")

        if is_connection_error(exc):
            return error_response(503, "unavailable", "The database is unavailable; retry shortly.")
        log.exception("unexpected error", extra={"method": request.method,
                                                  "path": request.url.path})
        return error_response(500, "internal", "Something went wrong on our side; it was logged.")
