"""Finding 5 (issue 14): a ``#token=`` link for another account does not silently switch a
signed-in browser (login CSRF); it asks first and names both accounts. Headless Chromium
against the real ``maxclaw serve``."""

from __future__ import annotations

import pytest
from playwright.async_api import Browser, BrowserContext, Page, expect

from tests.conftest import ServerProcess
from tests.e2e.webui_helpers import BROWSER_LOOP, DESKTOP, WebUser, make_user, screenshot

pytestmark = [pytest.mark.browser, BROWSER_LOOP]


async def follow(context: BrowserContext, base_url: str, token: str) -> Page:
    """Open a ``#token=`` link in a new tab of the same browser profile (shared storage)."""
    page = await context.new_page()
    await page.goto(f"{base_url}/#token={token}")
    return page


async def signed_in_as(page: Page, who: WebUser) -> None:
    await expect(page.locator(".conn")).to_have_attribute("data-state", "online")
    await expect(page.locator(f'.thread-item[data-thread-id="{who.main_thread_id}"]')) \
        .to_be_visible()
    assert await page.evaluate("localStorage.getItem('maxclaw.token')") == who.user_token


async def test_a_link_for_another_account_asks_before_switching(
        server: ServerProcess, database_url: str, browser: Browser) -> None:
    max_ = await make_user(database_url, server.base_url, "max")
    eve = await make_user(database_url, server.base_url, "eve")
    try:
        context = await browser.new_context(viewport=DESKTOP)
        first = await follow(context, server.base_url, max_.user_token)
        # not signed in before: the link asks too, naming the account (issue 34, finding 9)
        await first.get_by_role("button", name="Sign in as max").click()
        await signed_in_as(first, max_)
        await first.close()

        # eve's link: a prompt naming both accounts; nothing switched yet, no token in the URL
        page = await follow(context, server.base_url, eve.user_token)
        prompt = page.locator("#switch-account")
        await expect(prompt).to_be_visible()
        await expect(prompt.locator(".switch-theirs")).to_have_text("eve")
        await expect(prompt.locator(".switch-mine")).to_have_text("max")
        assert "token" not in page.url
        assert await page.evaluate("localStorage.getItem('maxclaw.token')") == max_.user_token
        await expect(page.locator(".conn")).to_have_count(0)
        await screenshot(page, "token-link-switch-prompt")
        await page.get_by_role("button", name="Stay signed in as max").click()
        await signed_in_as(page, max_)
        await page.close()

        # asked again, and this time switched on purpose
        page = await follow(context, server.base_url, eve.user_token)
        await page.get_by_role("button", name="Switch to eve").click()
        await signed_in_as(page, eve)
        await page.close()

        # a link with the token already in use asks nothing
        page = await follow(context, server.base_url, eve.user_token)
        await signed_in_as(page, eve)
        await expect(page.locator("#switch-account")).to_have_count(0)
        await context.close()
    finally:
        await max_.aclose()
        await eve.aclose()
