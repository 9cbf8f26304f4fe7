"""Finding 9: a ``#token=`` link never signs a browser in without asking, naming the account.

Issue 14 made a link for *another* account ask first. A browser with no account, or whose
stored token was refused, was still signed in quietly: a link someone else made moved it into
their account (login CSRF), and what it answered went to their agents. Now every link that
would sign the browser into an account asks, naming it; a refused link signs nothing in.
Headless Chromium against the real ``maxclaw serve``.
"""

from __future__ import annotations

import uuid

import pytest
from playwright.async_api import Browser, BrowserContext, Page, expect

from tests.conftest import ServerProcess
from tests.e2e.conftest import browser, shared_chromium  # noqa: F401  (the fixtures)
from tests.e2e.webui_helpers import BROWSER_LOOP, DESKTOP, make_user

pytestmark = [pytest.mark.browser, BROWSER_LOOP]


@pytest.fixture
def server(shared_server: ServerProcess) -> ServerProcess:
    """One server for the module (a start costs seconds of CPU); each test its own account."""
    return shared_server


def eve_name() -> str:
    return f"eve-{uuid.uuid4().hex[:6]}"


async def follow(context: BrowserContext, base_url: str, token: str) -> Page:
    page = await context.new_page()
    await page.goto(f"{base_url}/#token={token}")
    return page


async def stored(page: Page) -> str | None:
    value: str | None = await page.evaluate("localStorage.getItem('maxclaw.token')")
    return value


async def test_a_link_in_a_browser_with_no_account_asks_naming_it(
        server: ServerProcess, browser: Browser) -> None:  # noqa: F811
    eve = await make_user(server.database_url, server.base_url, eve_name())
    try:
        context = await browser.new_context(viewport=DESKTOP)
        page = await follow(context, server.base_url, eve.user_token)
        # before: signed in as eve at once, nothing asked
        prompt = page.locator("#signin-link")
        await expect(prompt).to_be_visible()
        await expect(prompt.locator(".link-account")).to_have_text(eve.name)
        assert "token" not in page.url
        assert await stored(page) is None
        await expect(page.locator(".conn")).to_have_count(0)
        # declined: the sign-in form, and nothing kept
        await page.get_by_role("button", name="Not now").click()
        await expect(page.locator("#token-input")).to_be_visible()
        assert await stored(page) is None
        await page.close()
        # accepted: signed in as eve
        page = await follow(context, server.base_url, eve.user_token)
        await page.get_by_role("button", name=f"Sign in as {eve.name}").click()
        await expect(page.locator(".conn")).to_have_attribute("data-state", "online")
        assert await stored(page) == eve.user_token
        await context.close()
    finally:
        await eve.aclose()


async def test_a_link_after_a_refused_token_asks_too(
        server: ServerProcess, browser: Browser) -> None:  # noqa: F811
    eve = await make_user(server.database_url, server.base_url, eve_name())
    try:
        context = await browser.new_context(viewport=DESKTOP)
        await context.add_init_script(
            "localStorage.getItem('maxclaw.token') || "
            "localStorage.setItem('maxclaw.token', 'mc_u_revoked-long-ago')")
        page = await follow(context, server.base_url, eve.user_token)
        # before: the dead token was replaced by the link's without a word
        prompt = page.locator("#signin-link")
        await expect(prompt).to_be_visible()
        await expect(prompt.locator(".link-account")).to_have_text(eve.name)
        assert await stored(page) == "mc_u_revoked-long-ago"
        await context.close()
    finally:
        await eve.aclose()


async def test_a_refused_link_signs_nothing_in(
        server: ServerProcess, browser: Browser) -> None:  # noqa: F811
    context = await browser.new_context(viewport=DESKTOP)
    page = await follow(context, server.base_url, "mc_u_not-a-token")
    await expect(page.locator("#signin-error")).to_contain_text("link")
    assert await stored(page) is None
    await context.close()
