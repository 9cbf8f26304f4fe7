"""Attach this capability's services and jobs to the container."""

from __future__ import annotations

from maxclaw.container import Services
from maxclaw.web.assets import WebAssets

WEB_ASSETS = "web_assets"


def register(services: Services) -> None:
    """Load the WebUI's static files once; ``api/routes/web.py`` serves them."""
    services.extra[WEB_ASSETS] = WebAssets.from_package()
