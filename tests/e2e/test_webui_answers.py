"""What a person sees of answers in the timeline: a compact chip in his words, linked to its
card, with the text written for the model one click away — never the model's text itself."""

from __future__ import annotations

import re

import pytest
from playwright.async_api import Browser, expect

from tests.conftest import ServerProcess
from tests.e2e.webui_helpers import (
    BROWSER_LOOP,
    CHOICE,
    SECRET,
    TEXT,
    WebUser,
    answer_for_max,
    component,
    new_thread,
    open_app,
    post_card,
    screenshot,
)

pytestmark = [pytest.mark.browser, pytest.mark.shared_serve, BROWSER_LOOP]
KEEP = "Keep one version (recommended)"


async def test_max_sees_his_answers_as_chips_not_as_the_models_text(
        server: ServerProcess, max_user: WebUser, browser: Browser) -> None:
    thread_id = await new_thread(max_user, "Status field rename")
    tab = await open_app(browser, server.base_url, max_user.user_token, thread_id)
    # one-question cards: each answer is its own message (a card of several is sent at once,
    # tests/e2e/test_webui_lifecycle.py)
    choice, text, secret = [f"{await post_card(max_user, thread_id, q)}:{q['id']}"
                            for q in (CHOICE, TEXT, SECRET)]

    await component(tab.page, choice).get_by_role("button", name=KEEP).click()
    chip = tab.page.locator(f'#timeline .msg.user .answer-chip[data-answers="{choice}"]')
    await expect(chip).to_contain_text("You chose Keep one version")
    await expect(chip.locator("strong")).to_have_text("Keep one version")
    # the model's text is not what the bubble says; it is behind "Full text"
    row = tab.page.locator("#timeline .msg.user").filter(
        has=tab.page.locator(f'.answer-chip[data-answers="{choice}"]'))
    await expect(row.locator(".answer-chip")).not_to_contain_text("Answer to")
    full = row.locator("details.full-text")
    await expect(full.locator("pre")).not_to_be_visible()
    await full.locator("summary").click()
    await expect(full.locator("pre")).to_be_visible()
    await expect(full.locator("pre")).to_contain_text('Answer to "Rename the status field"')
    await full.locator("summary").click()  # folded again

    field = component(tab.page, text).get_by_role("textbox")
    await field.fill("Ship it Friday")
    await component(tab.page, text).get_by_role("button", name=re.compile("^Send")).click()
    await expect(tab.page.locator(
        f'#timeline .answer-chip[data-answers="{text}"]')).to_contain_text(
        "You answered Ship it Friday")

    secret_value = "tok-do-not-show-9f8e"
    await component(tab.page, secret).get_by_label(re.compile("^Secret answer to")).fill(
        secret_value)
    await component(tab.page, secret).get_by_role("button", name=re.compile("^Submit")).click()
    hidden = tab.page.locator(f'#timeline .answer-chip[data-answers="{secret}"]')
    await expect(hidden).to_contain_text("Submitted (not echoed)")
    # nothing to unfold for a secret: the body never reaches the page
    await expect(tab.page.locator("#timeline .msg.user").filter(
        has=tab.page.locator(f'.answer-chip[data-answers="{secret}"]'))
                 .locator("details.full-text")).to_have_count(0)
    assert secret_value not in await tab.page.content()
    for row_text in await tab.page.locator("#timeline .msg.user").all_inner_texts():
        assert "null" not in row_text and "undefined" not in row_text, row_text
    await tab.page.locator("#timeline .msg.user").last.scroll_into_view_if_needed()
    # the README's picture of the timeline (docs/img/webui.png) is this screenshot
    await screenshot(tab.page, "06-answer-chips")

    # the chip links to its card
    await tab.page.evaluate("window.scrollTo(0, 0)")
    await chip.get_by_role("button", name=re.compile("^Show the card")).click()
    await expect(component(tab.page, choice)).to_be_focused()
    assert tab.errors == []


async def test_main_answering_reads_as_main_and_the_handoff_reads_as_a_handoff(
        server: ServerProcess, max_user: WebUser, browser: Browser) -> None:
    thread_id = await new_thread(max_user, "Status field rename")
    tab = await open_app(browser, server.base_url, max_user.user_token, thread_id)
    call_id = await post_card(max_user, thread_id, CHOICE)
    cid = f"{call_id}:q1"
    await component(tab.page, cid).get_by_role(
        "button", name=re.compile("^Let Main decide")).click()
    await expect(component(tab.page, cid)).to_have_attribute("data-status", "with-main")
    resp = await answer_for_max(max_user, cid, ["drop"], "Nothing reads the old field.")
    assert resp.status_code == 200, resp.text
    chip = tab.page.locator(f'#timeline .answer-chip[data-answers="{cid}"]')
    await expect(chip).to_contain_text("Main answered for you: Remove it now")

    await tab.page.locator(
        f'.thread-item[data-thread-id="{max_user.main_thread_id}"]').click()
    handoff = tab.page.locator(f'#timeline .handoff-chip[data-answers="{cid}"]')
    await expect(handoff).to_contain_text(
        "Handed to Main: Rename the status field — Keep the old field for one version?")
    await expect(handoff).to_contain_text("Handed to Main from Status field rename")
    await expect(handoff).not_to_contain_text("answer_for_max(")
    assert tab.errors == []
