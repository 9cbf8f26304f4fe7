"""The WebUI is served by the real ``maxclaw serve`` from inside the package, at ``/`` and
``/assets/{name}`` only, without shadowing the API, and references nothing outside itself."""

from __future__ import annotations

import re
from importlib import resources

import httpx
import pytest

from maxclaw.web.assets import WebAssets
from tests.conftest import ServerProcess


@pytest.fixture
def server(shared_server: ServerProcess) -> ServerProcess:
    """Every test here only reads what any server serves: one server for the module."""
    return shared_server

IMPORT = re.compile(r"""from\s+'\./([\w.-]+)'|import\s+'\./([\w.-]+)'""")
ASSET_REF = re.compile(r"""(?:href|src)="/assets/([\w.-]+)\"""")


def test_static_files_come_from_the_package() -> None:
    """Read through importlib.resources, so a wheel serves the same files as a checkout."""
    assets = WebAssets.from_package()
    folder = resources.files("maxclaw.web").joinpath("static")
    on_disk = sorted(e.name for e in folder.iterdir() if e.is_file())
    assert assets.names() == on_disk
    assert {"index.html", "app.js", "app.css"} <= set(assets.names())


def test_every_module_and_asset_reference_resolves_to_a_shipped_file() -> None:
    assets = WebAssets.from_package()
    names = set(assets.names())
    referenced = set(ASSET_REF.findall(assets.index.body.decode()))
    assert referenced == {"app.css", "app.js", "manifest.webmanifest", "icon-192.png",
                          "apple-touch-icon.png", "i18n.js", "messages-en.js",
                          "messages-zh-CN.js"}
    # the service worker loads the catalogue and i18n.js too (importScripts)
    worker = assets.service_worker.body.decode()
    for name in re.findall(r"'/assets/([\w.-]+)'", worker):
        assert name in names, f"sw.js imports /assets/{name}, which is not shipped"
    for name in names:
        asset = assets.get(name)
        assert asset is not None
        if asset.content_type == "image/png":
            continue  # icons: pictures, no references
        text = asset.body.decode()
        if name.endswith(".js"):
            for groups in IMPORT.findall(text):
                target = next(g for g in groups if g)
                assert target in names, f"{name} imports ./{target}, which is not shipped"
        # nothing is fetched from a CDN or another origin at run time
        assert not re.search(r"https?://", text), f"{name} refers to another origin"


def test_index_and_assets_are_served_with_a_strict_policy(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.base_url) as client:
        index = client.get("/")
        assert index.status_code == 200
        assert index.headers["content-type"].startswith("text/html")
        assert '<script type="module" src="/assets/app.js">' in index.text
        policy = index.headers["content-security-policy"]
        assert "script-src 'self'" in policy
        assert "connect-src 'self'" in policy
        script = client.get("/assets/app.js")
        assert script.status_code == 200
        assert script.headers["content-type"].startswith("text/javascript")
        again = client.get("/assets/app.js", headers={"If-None-Match": script.headers["etag"]})
        assert again.status_code == 304
        assert client.get("/assets/app.css").headers["content-type"].startswith("text/css")
        head = client.head("/")
        assert head.status_code == 200


def test_unknown_assets_are_404_error_bodies(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.base_url) as client:
        for path in ("/assets/nope.js", "/assets/..%2Fassets.py", "/assets/%2e%2e%2fwiring.py",
                     "/assets/"):
            resp = client.get(path)
            assert resp.status_code == 404, path
            assert resp.json()["code"] == "not_found", path


def test_the_webui_does_not_shadow_the_api(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.base_url) as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        assert client.get("/readyz").status_code == 200
        assert client.get("/metrics").headers["content-type"].startswith("text/plain")
        me = client.get("/v1/me")
        assert me.status_code == 401
        assert me.json()["code"] == "unauthorized"
        assert client.get("/v1/nothing-here").json()["code"] == "not_found"
