"""Issue 30, items 1 and 2 in the WebUI, in headless Chromium on a real ``serve``: a mis-tap
taken back from the card and from the decisions panel ("Take back": the card is open again,
the timeline says "Taken back"), and Stop beside "the agent is working…"."""

from __future__ import annotations

import pytest
from playwright.async_api import Browser, expect

from tests.conftest import ServerProcess
from tests.e2e.webui_helpers import (
    BROWSER_LOOP,
    CHOICE,
    WebUser,
    component,
    new_thread,
    open_app,
    panel_decision,
    post_card,
    screenshot,
)

pytestmark = [pytest.mark.browser, pytest.mark.shared_serve, BROWSER_LOOP]
QUESTION = "Keep the old field for one version?"


async def test_a_mis_tap_is_taken_back_from_the_card(
        server: ServerProcess, max_user: WebUser, browser: Browser) -> None:
    thread_id = await new_thread(max_user, "Status field rename")
    tab = await open_app(browser, server.base_url, max_user.user_token, thread_id)
    try:
        cid = f"{await post_card(max_user, thread_id, CHOICE)}:q1"
        card = component(tab.page, cid)
        await card.get_by_role("button", name="Remove it now").click()  # the mis-tap
        await expect(card).to_have_attribute("data-status", "answered")
        await card.get_by_role("button", name=f"Take back your answer: {QUESTION}").click()
        await expect(card).to_have_attribute("data-status", "open")
        await expect(card.get_by_role("button", name="Keep one version (recommended)")) \
            .to_be_enabled()
        await expect(tab.page.locator("#timeline .msg.taken-back")).to_have_count(1)
        await expect(tab.page.locator("#timeline .msg.taken-back .meta")) \
            .to_contain_text("Taken back")
        await screenshot(tab.page, "take-back-card")
        # the right answer now; the agent will only ever see this one
        await card.get_by_role("button", name="Keep one version (recommended)").click()
        await expect(card).to_have_attribute("data-status", "answered")
        assert tab.errors == []
    finally:
        await tab.context.close()


async def test_a_mis_tap_is_taken_back_from_the_panel(
        server: ServerProcess, max_user: WebUser, browser: Browser) -> None:
    thread_id = await new_thread(max_user, "Status field rename")
    # not watching the thread: the card gets its carrier, so the panel shows it
    tab = await open_app(browser, server.base_url, max_user.user_token)
    try:
        cid = f"{await post_card(max_user, thread_id, CHOICE)}:q1"
        item = panel_decision(tab.page, cid)
        await item.get_by_role("button", name="Remove it now").click()  # the mis-tap
        await expect(item).to_have_class("decision answered")
        assert (await max_user.user.get(f"/v1/components/{cid}")).json()["status"] == \
            "answered"
        await item.get_by_role("button", name=f"Take back your answer: {QUESTION}").click()
        await expect(item.get_by_role("button", name="Keep one version (recommended)")) \
            .to_be_enabled()
        assert (await max_user.user.get(f"/v1/components/{cid}")).json()["status"] == "open"
        await screenshot(tab.page, "take-back-panel")
        assert tab.errors == []
    finally:
        await tab.context.close()


async def test_stop_beside_running(server: ServerProcess, max_user: WebUser,
                                   browser: Browser) -> None:
    thread_id = await new_thread(max_user, "Long job")
    tab = await open_app(browser, server.base_url, max_user.user_token, thread_id)
    try:
        resp = await max_user.user.post(f"/v1/threads/{thread_id}/messages",
                                        json={"body": "Start the long job."})
        assert resp.status_code == 201
        claimed = await max_user.agent.post("/v1/agent/turns/claim", json={
            "wait_s": 0, "runtime_id": "rt", "thread_ids": [thread_id]})
        assert claimed.status_code == 200, claimed.text
        turn_id = claimed.json()["turn"]["id"]
        stop = tab.page.get_by_role("button", name="Stop the running turn")
        await expect(stop).to_be_visible()
        await stop.click()
        await expect(stop).to_have_count(0)
        resp = await max_user.agent.post(f"/v1/agent/threads/{thread_id}/messages", json={
            "role": "assistant", "content": "still going", "turn_id": turn_id})
        assert resp.status_code == 409 and resp.json()["code"] == "turn_stopped"
        assert tab.errors == []
    finally:
        await tab.context.close()
