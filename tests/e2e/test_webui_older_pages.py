"""Long threads in the WebUI (issue 29, item 4), in headless Chromium on a real ``serve``: a
thread opens on its newest page, and older messages come a page at a time as Max scrolls up
(an IntersectionObserver on a sentinel at the top), the message he was reading staying where it
was on screen, down to the thread's first message, with nothing shown twice — live frames
included.

The module shares one server: every test makes its own user."""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from playwright.async_api import Browser, Page, expect

from tests.conftest import ServerProcess
from tests.e2e.webui_helpers import (
    BROWSER_LOOP,
    CHOICE,
    WebUser,
    component,
    make_user,
    new_thread,
    open_app,
    post_card,
)

pytestmark = [pytest.mark.browser, BROWSER_LOOP]

MESSAGES = 250
PAGE = 100  # the WebUI's page (session.js: OLDER_PAGE)
ROWS = "#timeline > li.msg"
SENTINEL = "#timeline > li.older-sentinel"
# where a message row's top sits below the scroller's top edge, in CSS pixels
OFFSET_JS = """([id]) => {
  const row = document.querySelector(`#timeline > li[data-message-id="${id}"]`);
  const scroller = document.querySelector('.scroller');
  return row.getBoundingClientRect().top - scroller.getBoundingClientRect().top;
}"""
# put that row 40 px below the scroller's top (the sentinel is then within its margin)
SCROLL_TO_JS = """([id]) => {
  const row = document.querySelector(`#timeline > li[data-message-id="${id}"]`);
  const scroller = document.querySelector('.scroller');
  scroller.scrollTop += row.getBoundingClientRect().top - scroller.getBoundingClientRect().top - 40;
}"""
IDS_JS = """() => [...document.querySelectorAll('#timeline > li.msg')]
  .map((row) => Number(row.dataset.messageId))"""


@pytest.fixture
def server(shared_server: ServerProcess) -> ServerProcess:
    return shared_server


@pytest_asyncio.fixture(loop_scope="session")
async def max_user(shared_server: ServerProcess) -> AsyncIterator[WebUser]:
    who = await make_user(shared_server.database_url, shared_server.base_url,
                          f"max-{uuid.uuid4().hex[:8]}")
    yield who
    await who.aclose()


async def say(who: WebUser, thread_id: str, text: str) -> int:
    resp = await who.agent.post(f"/v1/agent/threads/{thread_id}/messages",
                                json={"role": "assistant", "content": text})
    assert resp.status_code == 201, resp.text
    return int(resp.json()["id"])


async def shown_ids(page: Page) -> list[int]:
    ids: list[int] = await page.evaluate(IDS_JS)
    return ids


async def test_older_messages_load_as_he_scrolls_up(
        server: ServerProcess, max_user: WebUser, browser: Browser) -> None:
    tid = await new_thread(max_user, "A long one")
    posted = [await say(max_user, tid, f"Message {n:04d}") for n in range(1, MESSAGES + 1)]
    tab = await open_app(browser, server.base_url, max_user.user_token, tid)
    page = tab.page
    try:
        # the newest page only, at its end; the sentinel waits above it
        await expect(page.locator(ROWS).last).to_contain_text(f"Message {MESSAGES:04d}")
        await expect(page.locator(ROWS)).to_have_count(PAGE)
        await expect(page.locator(SENTINEL)).to_have_count(1)
        assert await shown_ids(page) == posted[-PAGE:]

        # a live message while older pages are still to come: shown once, at the end
        live = await say(max_user, tid, "Live while reading")
        await expect(page.locator(ROWS).last).to_contain_text("Live while reading")

        # scroll up to the oldest shown message: the page before it comes in above, and that
        # message stays where it was on screen
        reading = posted[-PAGE]
        await page.evaluate(SCROLL_TO_JS, [reading])
        before: float = await page.evaluate(OFFSET_JS, [reading])
        await expect(page.locator(ROWS)).to_have_count(2 * PAGE + 1)
        after: float = await page.evaluate(OFFSET_JS, [reading])
        assert abs(after - before) <= 1, (before, after)

        # on up: the rest, down to the first message, and then no sentinel
        await page.evaluate(SCROLL_TO_JS, [posted[-2 * PAGE]])
        await expect(page.locator(ROWS)).to_have_count(MESSAGES + 1)
        await expect(page.locator(SENTINEL)).to_have_count(0)
        await expect(page.locator(ROWS).first).to_contain_text("Message 0001")
        ids = await shown_ids(page)
        assert ids == [*posted, live]  # every message once, in order
        assert len(set(ids)) == len(ids)

        # one more live message after the whole thread is in: still no duplicates
        again = await say(max_user, tid, "Live at the end")
        await expect(page.locator(ROWS).last).to_contain_text("Live at the end")
        assert await shown_ids(page) == [*posted, live, again]
        assert tab.errors == []
    finally:
        await tab.context.close()


async def test_a_search_result_in_an_older_page_is_loaded_and_shown(
        server: ServerProcess, max_user: WebUser, browser: Browser) -> None:
    tid = await new_thread(max_user, "Search me")
    posted = [await say(max_user, tid, f"Entry {n:03d}" + (" zanzibar" if n == 3 else ""))
              for n in range(1, 2 * PAGE + 21)]
    tab = await open_app(browser, server.base_url, max_user.user_token, tid)
    page = tab.page
    try:
        await expect(page.locator(ROWS)).to_have_count(PAGE)
        await page.fill("#search-input", "zanzibar")
        await page.press("#search-input", "Enter")
        await page.locator(f'#search-results .search-hit[data-message-id="{posted[2]}"]').click()
        target = page.locator(f'#timeline > li[data-message-id="{posted[2]}"]')
        await expect(target).to_have_class("msg assistant search-target")
        await expect(target).to_be_in_viewport()
        assert tab.errors == []
    finally:
        await tab.context.close()


async def test_an_answer_s_link_to_its_card_in_an_older_page_loads_back_to_it(
        server: ServerProcess, max_user: WebUser, browser: Browser) -> None:
    tid = await new_thread(max_user, "Card far up")
    cid = f"{await post_card(max_user, tid, CHOICE)}:q1"
    for n in range(1, PAGE + 21):
        await say(max_user, tid, f"Later {n:03d}")
    resp = await max_user.user.post(f"/v1/components/{cid}/answer", json={"selected": ["keep"]})
    assert resp.status_code == 200, resp.text
    tab = await open_app(browser, server.base_url, max_user.user_token, tid)
    page = tab.page
    try:
        chip = page.locator(f'#timeline .answer-chip[data-answers="{cid}"]')
        await expect(chip).to_have_count(1)
        await expect(component(page, cid)).to_have_count(0)  # not loaded yet
        await chip.get_by_role("button", name=re.compile("^Show the card")).click()
        await expect(component(page, cid)).to_be_focused()
        await expect(component(page, cid)).to_be_in_viewport()
        assert tab.errors == []
    finally:
        await tab.context.close()
