"""``/docs``: the API reference (Swagger UI), served from installed packages, no CDN.

FastAPI's own ``/docs`` loads Swagger UI's script and stylesheet from a CDN and starts it with an
inline script, so a browser that opens it reaches a third party, and the WebUI's CSP
(``script-src 'self'``) would refuse it. Here the page and its start-up script are ours
(``apidocs/``), and Swagger UI's two files come from the ``fastapi-offline`` package, which
ships them (Apache-2.0, Swagger UI's licence); they are read once, like the WebUI's, and
served under the same CSP. ReDoc is not offered: it starts web workers from ``blob:`` URLs and
injects ``<style>`` elements, which that CSP refuses.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable

from maxclaw.web.assets import CONTENT_TYPES, Asset, make_asset

OWN_PACKAGE = "maxclaw.web"
OWN_DIR = "apidocs"
PAGE = "docs.html"
SWAGGER_PACKAGE = "fastapi_offline"
SWAGGER_FILES = ("swagger-ui-bundle.js", "swagger-ui.css")


@dataclass(frozen=True, slots=True)
class DocsAssets:
    """The ``/docs`` page and the files it loads, by name (the names are the whitelist)."""

    page: Asset
    files: dict[str, Asset]

    @classmethod
    def from_packages(cls) -> DocsAssets:
        own = resources.files(OWN_PACKAGE).joinpath(OWN_DIR)
        swagger = resources.files(SWAGGER_PACKAGE).joinpath("static")
        files = {"docs.js": _read(own, "docs.js")}
        for name in SWAGGER_FILES:
            files[name] = _read(swagger, name)
        return cls(_read(own, PAGE), files)

    def get(self, name: str) -> Asset | None:
        return self.files.get(name)


def _read(folder: Traversable, name: str) -> Asset:
    entry = folder.joinpath(name)
    if not entry.is_file():
        raise RuntimeError(f"/docs needs {name}, which is missing from {folder}")
    return make_asset(name, entry.read_bytes(), CONTENT_TYPES["." + name.rsplit(".", 1)[-1]])
