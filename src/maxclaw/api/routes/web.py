"""The WebUI: ``/`` serves the app shell, ``/assets/{name}`` its files, ``/sw.js`` its
service worker; ``/docs`` the API reference and ``/docs/assets/{name}`` its files.

Mounted last, and only on these paths, so it can never shadow ``/v1``, ``/healthz``,
``/readyz`` or ``/metrics``.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from maxclaw.api.deps import services_of
from maxclaw.errors import NotFound
from maxclaw.web.assets import CONTENT_SECURITY_POLICY, Asset, WebAssets

router = APIRouter()


def _assets(request: Request) -> WebAssets:
    return services_of(request).web_assets


def _respond(request: Request, asset: Asset, extra: dict[str, str] | None = None) -> Response:
    # no-cache + ETag: a browser revalidates, so an upgrade is picked up on the next load
    headers = {
        **(extra or {}),
        "ETag": asset.etag,
        "Cache-Control": "no-cache",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    }
    if request.headers.get("if-none-match") == asset.etag:
        return Response(status_code=304, headers=headers)
    return Response(asset.body, media_type=asset.content_type, headers=headers)


@router.api_route("/", methods=["GET", "HEAD"], include_in_schema=False)
async def index(request: Request) -> Response:
    """The app shell; routing inside the app uses the URL fragment (``#/t/<thread id>``)."""
    return _respond(request, _assets(request).index)


@router.api_route("/sw.js", methods=["GET", "HEAD"], include_in_schema=False)
async def service_worker(request: Request) -> Response:
    """The service worker, from the root so its scope is the whole app (push, offline shell).

    The asset route would limit it to ``/assets/``; it carries the same CSP as every file."""
    return _respond(request, _assets(request).service_worker, {"Service-Worker-Allowed": "/"})


@router.api_route("/assets/{name}", methods=["GET", "HEAD"], include_in_schema=False)
async def asset(name: str, request: Request) -> Response:
    """One file of the app by its exact name (the folder's listing is the whitelist)."""
    found = _assets(request).get(name)
    if found is None:
        raise NotFound(f"The WebUI has no file called {name!r}.")
    return _respond(request, found)


@router.api_route("/docs", methods=["GET", "HEAD"], include_in_schema=False)
async def api_docs(request: Request) -> Response:
    """The API reference (Swagger UI over ``/openapi.json``), from the server's own files."""
    return _respond(request, services_of(request).docs_assets.page)


@router.api_route("/docs/assets/{name}", methods=["GET", "HEAD"], include_in_schema=False)
async def api_docs_asset(name: str, request: Request) -> Response:
    """Swagger UI's script and stylesheet, and the page's start-up script, by exact name."""
    found = services_of(request).docs_assets.get(name)
    if found is None:
        raise NotFound(f"/docs has no file called {name!r}.")
    return _respond(request, found)
