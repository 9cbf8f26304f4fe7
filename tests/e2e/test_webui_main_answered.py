"""The decisions panel keeps an answer Main gave for Max ("Answered by Main", with Revoke and
Dismiss) until he acts on it (issue 16, item 5), in headless Chromium on a real ``serve``."""

from __future__ import annotations

import pytest
from playwright.async_api import Browser, expect

from tests.conftest import ServerProcess
from tests.e2e.webui_helpers import (
    BROWSER_LOOP,
    CHOICE,
    WebUser,
    answer_for_max,
    component,
    new_thread,
    open_app,
    panel_decision,
    post_card,
    screenshot,
)

pytestmark = [pytest.mark.browser, pytest.mark.shared_serve, BROWSER_LOOP]


async def main_answers(who: WebUser, thread_id: str) -> str:
    """A card handed to Main and answered by it; returns the component id."""
    cid = f"{await post_card(who, thread_id, CHOICE)}:q1"
    resp = await who.user.post(f"/v1/components/{cid}/to-main")
    assert resp.status_code == 200, resp.text
    resp = await answer_for_max(who, cid, ["keep"], "you always keep one version")
    assert resp.status_code == 200, resp.text
    return cid


async def test_the_panel_shows_mains_answer_with_revoke_and_dismiss(
        server: ServerProcess, max_user: WebUser, browser: Browser) -> None:
    thread_id = await new_thread(max_user, "Status field rename")
    tab = await open_app(browser, server.base_url, max_user.user_token, thread_id)
    first = await main_answers(max_user, thread_id)

    item = panel_decision(tab.page, first)
    await expect(item).to_have_class("decision main-answered")
    await expect(item.locator(".answered-by-main")).to_have_text(
        "Answered by Main: Keep one version")
    await screenshot(tab.page, "main-answered-panel")
    # Revoke: the card reopens and the item is an open question again, answerable here
    await item.get_by_role("button", name="Revoke Main's answer: Keep the old field for one "
                                           "version?").click()
    await expect(component(tab.page, first)).to_have_attribute("data-status", "revoked")
    await expect(item).not_to_have_class("decision main-answered")
    await expect(item.get_by_role("button", name="Keep one version (recommended)")) \
        .to_be_enabled()

    # a second one, dismissed: it leaves the panel, and stays gone after a reload
    second = await main_answers(max_user, thread_id)
    other = panel_decision(tab.page, second)
    await expect(other.locator(".answered-by-main")).to_be_visible()
    await other.get_by_role("button", name="Dismiss: keep Main's answer to Keep the old field "
                                            "for one version?").click()
    await expect(other).to_have_count(0)
    await expect(component(tab.page, second)).to_have_attribute("data-status", "main-answered")
    await tab.page.reload()
    await expect(tab.page.locator(".conn")).to_have_attribute("data-state", "online")
    await expect(panel_decision(tab.page, first)).to_have_count(1)  # still open: revoked
    await expect(panel_decision(tab.page, second)).to_have_count(0)
    assert tab.errors == []
    await tab.context.close()
