"""Rename, archive and delete a thread, and search then jump, in the WebUI (issue 30, items 3
and 5), in headless Debian Chromium against a real ``maxclaw serve``."""

from __future__ import annotations

import pytest
from playwright.async_api import Browser, Dialog, expect

from tests.conftest import ServerProcess
from tests.e2e.webui_helpers import (
    BROWSER_LOOP,
    CHOICE,
    WebUser,
    component,
    new_thread,
    open_app,
    post_card,
)

pytestmark = [pytest.mark.browser, pytest.mark.shared_serve, BROWSER_LOOP]


async def say(who: WebUser, thread_id: str, body: str) -> int:
    resp = await who.user.post(f"/v1/threads/{thread_id}/messages", json={"body": body})
    assert resp.status_code == 201, resp.text
    return int(resp.json()["id"])


async def test_rename_archive_delete_and_search_then_jump(
        browser: Browser, server: ServerProcess, max_user: WebUser) -> None:
    tid = await new_thread(max_user, "Release prep")
    other = await new_thread(max_user, "Long thread")
    for i in range(60):  # enough rows that the target is off screen when the thread opens
        await say(max_user, other, f"filler message {i}")
    target = await say(max_user, other, "the quarterly kettle audit happens on Friday")
    for i in range(60):
        await say(max_user, other, f"more filler {i}")
    call_id = await post_card(max_user, tid, CHOICE)
    cid = f"{call_id}:{CHOICE['id']}"

    tab = await open_app(browser, server.base_url, max_user.user_token, tid)
    page = tab.page
    await expect(component(page, cid)).to_be_visible()

    # rename
    async def answer_prompt(dialog: Dialog) -> None:
        await dialog.accept("Release checklist" if dialog.type == "prompt" else None)
    page.on("dialog", answer_prompt)
    await page.click("#thread-rename")
    item = page.locator(f'.thread-item[data-thread-id="{tid}"]')
    await expect(item).to_contain_text("Release checklist")
    await expect(page.locator("#thread-title")).to_have_text("Release checklist")

    # archive: OK on the confirm withdraws its open question; the thread leaves the list once
    # another thread is on screen
    await page.click("#thread-archive")
    await expect(page.locator("#thread-archive")).to_have_text("Unarchive")
    got = (await max_user.user.get(f"/v1/components/{cid}")).json()
    assert got["status"] == "withdrawn" and got["withdrawn_reason"] == "archived"
    await page.goto(f"{server.base_url}/#/t/{max_user.main_thread_id}")
    await expect(item).to_have_count(0)
    # a new message brings it back
    await say(max_user, tid, "one more thing")
    await expect(item).to_have_count(1)

    # search, then jump to the message (in another thread, far up its timeline)
    await page.fill("#search-input", "kettle")
    await page.press("#search-input", "Enter")
    hit = page.locator(f'#search-results .search-hit[data-message-id="{target}"]')
    await expect(hit).to_be_visible()
    await expect(hit.locator("mark")).to_have_text("kettle")
    await hit.click()
    row = page.locator(f'#timeline [data-message-id="{target}"]')
    await expect(row).to_have_class("msg user search-target")
    await expect(row).to_be_in_viewport()
    await expect(row).to_be_focused()

    # delete (confirmed): the thread is gone, here and on the server
    await page.goto(f"{server.base_url}/#/t/{tid}")
    await expect(page.locator("#thread-title")).to_have_text("Release checklist")
    await page.click("#thread-delete")
    await expect(item).to_have_count(0)
    assert (await max_user.user.get(f"/v1/threads/{tid}")).status_code == 404
    # Main's thread offers none of these
    await expect(page.locator("#thread-actions")).to_be_hidden()
    assert tab.errors == []
    await tab.context.close()
