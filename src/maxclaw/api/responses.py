"""What every route documents besides its own body: the error statuses, each with
``api.md``'s error body (``{"code", "message", "data"}``, ``api/errors.py``).

A route answers with its wire model (``maxclaw.wire.models``) through ``response_model`` and
``response_model_exclude_unset=True``: the body is checked against the model and described in
``/openapi.json``, while a field the model does not declare is kept (the models allow extras)
and a default the service did not send is not added, so the bytes are the service's.
"""

from __future__ import annotations

from typing import Any

from maxclaw.wire.models import ErrorBody

_REASONS = {
    400: "Malformed JSON or the wrong content type (`bad_request`).",
    401: "No token, or a bad, revoked or expired one (`unauthorized`).",
    403: "The other role's token, or a tool not offered in that thread (`forbidden`).",
    404: "No such object of the caller's, or a malformed id (`not_found`).",
    409: "The object's state refuses it (`settled`, `locked`, `not_transferable`, "
         "`irreversible`, `withdrawn`, `expired`, `conflict`).",
    413: "The body is over the size limit (`too_large`).",
    422: "The request does not validate (`invalid`, with `data.errors`).",
    429: "A per-user or per-address limit (`rate_limited`, with `Retry-After`).",
    503: "The database is unavailable; retry (`unavailable`).",
}

# every route's error statuses, for ``APIRouter(responses=ERRORS)``
ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": reason} for status, reason in _REASONS.items()}
