"""Issue 14, finding 8: ``/docs`` loads in headless Chromium from the server's own files, under
the WebUI's CSP: no request leaves the server, no CSP violation, no script error. (Before:
FastAPI's page loaded Swagger UI from a CDN and started it with an inline script.)"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.async_api import Browser, ConsoleMessage, Route, expect

from maxclaw.web.assets import CONTENT_SECURITY_POLICY
from tests.conftest import ServerProcess
from tests.e2e.webui_helpers import BROWSER_LOOP


@pytest.fixture
def server(shared_server: ServerProcess) -> ServerProcess:
    """Every test here only reads what any server serves: one server for the module."""
    return shared_server


pytestmark = [pytest.mark.browser, BROWSER_LOOP]

# every CSP violation the page meets, as the browser reports it to the page itself
WATCH_CSP = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__csp.push({directive: e.violatedDirective, blocked: e.blockedURI,
                     sample: e.sample, source: e.sourceFile});
});
"""


async def test_docs_load_from_the_server_alone(server: ServerProcess, browser: Browser) -> None:
    origin = urlsplit(server.base_url).netloc
    context = await browser.new_context()
    await context.add_init_script(WATCH_CSP)
    outside: list[str] = []
    requested: list[str] = []

    async def only_the_server(route: Route) -> None:
        url = route.request.url
        requested.append(url)
        if urlsplit(url).scheme in ("data", "blob") or urlsplit(url).netloc == origin:
            await route.continue_()
        else:
            outside.append(url)
            await route.abort()

    await context.route("**/*", only_the_server)
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            errors.append(message.text)

    page.on("console", on_console)
    response = await page.goto(server.base_url + "/docs")
    assert response is not None and response.status == 200
    assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    # Swagger UI drew the service's own schema: its title and an agent operation
    await expect(page.locator(".swagger-ui .info .title")).to_contain_text("MaxClaw",
                                                                          timeout=15_000)
    await expect(page.locator(".opblock-summary-path", has_text="/v1/agent/turns/claim")
                 ).to_be_visible()
    await page.wait_for_load_state("networkidle")
    violations: list[dict[str, Any]] = await page.evaluate("window.__csp")
    await context.close()
    assert outside == []
    assert violations == []
    assert errors == []
    assert f"{server.base_url}/docs/assets/swagger-ui-bundle.js" in requested
    assert f"{server.base_url}/openapi.json" in requested


async def test_docs_files_are_the_packages(server: ServerProcess) -> None:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=15) as http:
        page = await http.get("/docs")
        assert "<script>" not in page.text  # nothing inline: the CSP would refuse it
        for name, kind in (("swagger-ui-bundle.js", "text/javascript"),
                           ("swagger-ui.css", "text/css"), ("docs.js", "text/javascript")):
            resp = await http.get(f"/docs/assets/{name}")
            assert resp.status_code == 200 and resp.headers["content-type"].startswith(kind)
            assert resp.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
            again = await http.get(f"/docs/assets/{name}",
                                   headers={"If-None-Match": resp.headers["etag"]})
            assert again.status_code == 304
        assert (await http.get("/docs/assets/..%2Fdocs.html")).status_code == 404
        assert (await http.get("/docs/assets/redoc.standalone.js")).status_code == 404
        assert (await http.get("/redoc")).status_code == 404  # it needs blob: workers
