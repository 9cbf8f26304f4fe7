"""What every route documents besides its own body: the error statuses, each with
``api.md``'s error body (``{"code", "message", "data"}``, ``api/errors.py``).

A route answers with its wire model (``maxclaw.wire.models``) through ``response_model`` and
``response_model_exclude_unset=True``: the body is checked against the model and described in
``/openapi.json``, while a field the model does not declare is kept (the models allow extras)
and a default the service did not send is not added, so the bytes are the service's.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

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

# every route's error statuses, for ``APIRouter(responses=ERRORS)``. The body is a reference to
# ErrorBody's schema, which ``document_error_body`` puts in the document once, not ``"model":
# ErrorBody``: with a model, FastAPI builds a validator and a serializer for each status of each
# route (nine per route), per app, at its first request, for the document alone (5.2 of 23 s of
# CPU over 74 in-process tests: docs/benchmarks.md, issue 33 item 4, fifth pass). The document
# is the same either way (tests/unit/test_openapi_contract.py).
ERROR_SCHEMA_REF = "#/components/schemas/ErrorBody"
ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"description": reason,
             "content": {"application/json": {"schema": {"$ref": ERROR_SCHEMA_REF}}}}
    for status, reason in _REASONS.items()}


def document_error_body(app: FastAPI) -> None:
    """Make ``app.openapi()`` carry ErrorBody's schema, which ``ERRORS`` refers to."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        document = generate()  # FastAPI's, cached on the app after the first call
        schemas = document.setdefault("components", {}).setdefault("schemas", {})
        schemas.setdefault("ErrorBody", ErrorBody.model_json_schema(
            mode="serialization", ref_template="#/components/schemas/{model}"))
        return document

    app.openapi = openapi  # type: ignore[method-assign]
