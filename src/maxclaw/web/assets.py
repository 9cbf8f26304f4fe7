"""The WebUI's static files, read once from inside the installed package.

They are read with ``importlib.resources`` (never a path from the working directory), so a wheel
or an editable install serves the same files; nothing is fetched from a CDN or at run time.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from importlib import resources

STATIC_PACKAGE = "maxclaw.web"
STATIC_DIR = "static"
INDEX = "index.html"
SERVICE_WORKER = "sw.js"
# the app shell the service worker keeps for offline starts: the page and every file it loads
SHELL_SUFFIXES = (".js", ".css", ".png", ".svg", ".webmanifest")

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".webmanifest": "application/manifest+json",
}

# The app only ever talks to its own origin: no CDN, no inline script, no third-party frames.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; manifest-src 'self'; worker-src 'self'; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'"
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
        self.service_worker = _service_worker(assets)

    @classmethod
    def from_package(cls) -> WebAssets:
        """Read the static folder shipped inside the package."""
        folder = resources.files(STATIC_PACKAGE).joinpath(STATIC_DIR)
        assets: dict[str, Asset] = {}
        for entry in folder.iterdir():
            suffix = "." + entry.name.rsplit(".", 1)[-1] if "." in entry.name else ""
            if not entry.is_file() or suffix not in CONTENT_TYPES:
                continue
            assets[entry.name] = make_asset(entry.name, entry.read_bytes(), CONTENT_TYPES[suffix])
        for required in (INDEX, SERVICE_WORKER):
            if required not in assets:
                raise RuntimeError(f"the WebUI's {required} is missing from the "
                                   f"{STATIC_PACKAGE} package")
        return cls(assets)

    def get(self, name: str) -> Asset | None:
        """The asset called ``name``, or None (no path is ever joined from user input)."""
        return self._assets.get(name)

    @property
    def index(self) -> Asset:
        return self._assets[INDEX]

    def names(self) -> list[str]:
        return sorted(self._assets)


def make_asset(name: str, body: bytes, content_type: str) -> Asset:
    """An asset with its ETag (a prefix of its SHA-256)."""
    etag = '"' + hashlib.sha256(body).hexdigest()[:20] + '"'
    return Asset(name, body, content_type, etag)


def _service_worker(assets: dict[str, Asset]) -> Asset:
    """``sw.js`` as served at ``/sw.js``: prefixed with the shell it caches and a version that
    changes with any file, so a new release installs a new worker (and drops the old cache)."""
    shell = ["/"] + [f"/assets/{name}" for name in sorted(assets)
                     if name != SERVICE_WORKER and name.endswith(SHELL_SUFFIXES)]
    version = hashlib.sha256("".join(a.etag for _, a in sorted(assets.items())).encode())
    prefix = (f"const SHELL = {json.dumps(shell)};\n"
              f"const SHELL_VERSION = {json.dumps(version.hexdigest()[:16])};\n")
    source = assets[SERVICE_WORKER]
    return make_asset(SERVICE_WORKER, prefix.encode() + source.body, source.content_type)
