"""The WebUI's static files, read once from inside the installed package.

They are read with ``importlib.resources`` (never a path from the working directory), so a wheel
or an editable install serves the same files; nothing is fetched from a CDN or at run time.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources

STATIC_PACKAGE = "maxclaw.web"
STATIC_DIR = "static"
INDEX = "index.html"

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}

# The app only ever talks to its own origin: no CDN, no inline script, no third-party frames.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


@dataclass(frozen=True, slots=True)
class Asset:
    """One file of the WebUI, with what a response needs."""

    name: str
    body: bytes
    content_type: str
    etag: str


class WebAssets:
    """Every file of ``maxclaw/web/static`` by name (a flat folder: names are the whitelist)."""

    def __init__(self, assets: dict[str, Asset]) -> None:
        self._assets = assets

    @classmethod
    def from_package(cls) -> WebAssets:
        """Read the static folder shipped inside the package."""
        folder = resources.files(STATIC_PACKAGE).joinpath(STATIC_DIR)
        assets: dict[str, Asset] = {}
        for entry in folder.iterdir():
            suffix = "." + entry.name.rsplit(".", 1)[-1] if "." in entry.name else ""
            if not entry.is_file() or suffix not in CONTENT_TYPES:
                continue
            body = entry.read_bytes()
            etag = '"' + hashlib.sha256(body).hexdigest()[:20] + '"'
            assets[entry.name] = Asset(entry.name, body, CONTENT_TYPES[suffix], etag)
        if INDEX not in assets:
            raise RuntimeError(f"the WebUI's {INDEX} is missing from the {STATIC_PACKAGE} package")
        return cls(assets)

    def get(self, name: str) -> Asset | None:
        """The asset called ``name``, or None (no path is ever joined from user input)."""
        return self._assets.get(name)

    @property
    def index(self) -> Asset:
        return self._assets[INDEX]

    def names(self) -> list[str]:
        return sorted(self._assets)
