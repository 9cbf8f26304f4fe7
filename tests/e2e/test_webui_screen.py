"""A screen for the whole day (issue 29, item 4), in headless Chromium on a real ``serve``:
Markdown in agents' words without any HTML getting through, dark mode (the system's and a
manual switch), keyboard shortcuts, and an axe-core scan of the main views.

The module shares one server: every test makes its own user, and nothing here reads another
user's rows."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import axe_playwright_python
import pytest
from playwright.async_api import Browser, Page, expect

from tests.conftest import ServerProcess
from tests.e2e.webui_helpers import (
    BROWSER_LOOP,
    CHOICE,
    TEXT,
    WebUser,
    component,
    new_thread,
    open_app,
    post_card,
    post_tool_call,
)

pytestmark = [pytest.mark.browser, pytest.mark.shared_serve, BROWSER_LOOP]

HOSTILE = (
    "Plan for **the migration**:\n\n"
    "1. Add the column with `ALTER TABLE`\n"
    "2. Backfill\n\n"
    "- see [the runbook](https://example.org/runbook)\n"
    "- not a link: [x](javascript:alert(1))\n"
    "- nor this: [y](javascript:void0)\n\n"
    "<img src=x onerror=\"window.__pwned = 1\"> <script>window.__pwned = 2</script>\n\n"
    "```\nSELECT * FROM users WHERE id = 1;\n<b>not bold</b>\n```"
)
MULTI = {"id": "q5", "kind": "choice", "question": "Which *databases*?", "multiple": True,
         "options": [{"id": "pg", "label": "PostgreSQL"}, {"id": "my", "label": "MySQL"}]}




async def assistant_says(who: WebUser, thread_id: str, text: str) -> None:
    resp = await who.agent.post(f"/v1/agent/threads/{thread_id}/messages",
                                json={"role": "assistant", "content": text})
    assert resp.status_code == 201, resp.text


async def test_markdown_is_rendered_and_no_html_gets_through(
        server: ServerProcess, max_user: WebUser, browser: Browser) -> None:
    tid = await new_thread(max_user, "Migration")
    await assistant_says(max_user, tid, HOSTILE)
    call = await post_card(max_user, tid, {**CHOICE, "question": "Keep **`old_status`**?"})
    tab = await open_app(browser, server.base_url, max_user.user_token, tid)
    page = tab.page
    bubble = page.locator("#timeline .msg.assistant .bubble.rich").first
    await expect(bubble.locator("strong").first).to_have_text("the migration")
    await expect(bubble.locator("ol li")).to_have_count(2)
    await expect(bubble.locator("ol li code")).to_have_text("ALTER TABLE")
    runbook = bubble.locator("a")
    await expect(runbook).to_have_count(1)  # the javascript: one stays text
    assert await runbook.get_attribute("href") == "https://example.org/runbook"
    assert await runbook.get_attribute("rel") == "noopener noreferrer"
    assert await runbook.get_attribute("target") == "_blank"
    await expect(bubble).to_contain_text("not a link: [x](javascript:alert(1))")
    await expect(bubble).to_contain_text("nor this: y (javascript:void0)")
    # the HTML is shown as the text it is, in the paragraph and in the code block
    await expect(bubble).to_contain_text('<img src=x onerror="window.__pwned = 1">')
    await expect(bubble.locator("pre.code code")).to_have_text(
        "SELECT * FROM users WHERE id = 1;\n<b>not bold</b>")
    assert await bubble.locator("img, script, b").count() == 0
    assert await page.evaluate("window.__pwned") is None
    # card text: inline Markdown only
    question = component(page, f"{call}:q1").locator(".question")
    await expect(question.locator("strong code")).to_have_text("old_status")
    assert tab.errors == []
    await tab.context.close()


async def background(page: Page) -> str:
    color: str = await page.evaluate("getComputedStyle(document.documentElement).backgroundColor")
    return color


async def test_dark_mode_follows_the_system_and_the_switch_overrides_it(
        server: ServerProcess, max_user: WebUser, browser: Browser) -> None:
    tab = await open_app(browser, server.base_url, max_user.user_token)
    page = tab.page
    await page.emulate_media(color_scheme="light")
    assert await page.evaluate("document.documentElement.dataset.theme") == "light"
    light = await background(page)
    await page.emulate_media(color_scheme="dark")  # the system flips: the page follows live
    await expect(page.locator("html")).to_have_attribute("data-theme", "dark")
    dark = await background(page)
    assert dark != light

    switch = page.locator("#theme-button")
    await expect(switch).to_have_attribute("data-choice", "system")
    await switch.click()  # system → dark
    await switch.click()  # dark → light, whatever the system says
    await expect(page.locator("html")).to_have_attribute("data-theme", "light")
    assert await background(page) == light
    await page.reload()  # kept on this device
    await expect(page.locator(".conn")).to_have_attribute("data-state", "online")
    await expect(page.locator("html")).to_have_attribute("data-theme", "light")
    await expect(page.locator("#theme-button")).to_have_attribute("data-choice", "light")
    assert tab.errors == []
    await tab.context.close()


async def test_keyboard_shortcuts_pick_move_and_list(
        server: ServerProcess, max_user: WebUser, browser: Browser) -> None:
    tid = await new_thread(max_user, "Keys")
    first = await post_card(max_user, tid, CHOICE)  # one question: a pick answers it
    typed = await post_card(max_user, tid, TEXT)
    second = await post_card(max_user, tid, MULTI)
    tab = await open_app(browser, server.base_url, max_user.user_token, tid)
    page = tab.page
    await expect(component(page, f"{second}:q5")).to_be_visible()

    await page.keyboard.press("j")  # the first open card
    await expect(component(page, f"{first}:q1")).to_have_class(
        "component status-open kbd-current")
    await page.keyboard.press("j")  # the text question has no options: skipped
    await expect(component(page, f"{second}:q5")).to_have_class(
        "component status-open kbd-current")
    await page.keyboard.press("2")  # toggles MySQL, submits nothing
    assert await component(page, f"{second}:q5").locator(
        'input[type="checkbox"]').nth(1).is_checked()
    await page.keyboard.press("k")
    await page.keyboard.press("1")  # "Keep one version": answers the card
    await expect(component(page, f"{first}:q1")).to_have_attribute("data-status", "answered")
    state = (await max_user.user.get(f"/v1/components/{first}:q1")).json()
    assert state["answer"]["selected"] == ["keep"] and state["answered_via"] == "card"

    # typing is the field's: a digit in the reply box answers nothing
    reply = component(page, f"{typed}:q2").locator("textarea, input.reply").first
    await reply.click()
    await page.keyboard.type("3 things")
    await expect(reply).to_have_value("3 things")

    await page.locator("body").click(position={"x": 5, "y": 5})
    await page.keyboard.press("?")
    dialog = page.locator("#shortcuts")
    await expect(dialog).to_be_visible()
    await expect(dialog.locator("dt")).to_have_count(4)
    await dialog.get_by_role("button", name="Close").click()
    await expect(dialog).to_be_hidden()
    assert tab.errors == []
    await tab.context.close()


AXE_RUN = """async () => {
  const results = await axe.run(document, {resultTypes: ['violations']});
  return {rules_passed: results.passes.length,
          violations: results.violations.map((v) => ({id: v.id, impact: v.impact, help: v.help,
            nodes: v.nodes.slice(0, 3).map((n) => n.target.join(' '))}))};
}"""


async def serious_violations(page: Page) -> list[dict[str, Any]]:
    script = resources.files(axe_playwright_python).joinpath("axe.min.js").read_text()
    await page.evaluate(script)
    found: dict[str, Any] = await page.evaluate(AXE_RUN)
    assert found["rules_passed"] > 10  # it did scan the page (a wrong context passes nothing)
    print("axe:", found["rules_passed"], "rules passed; minor/moderate:",
          [(v["id"], v["impact"]) for v in found["violations"]])
    return [v for v in found["violations"] if v["impact"] in ("serious", "critical")]


@pytest.mark.parametrize("theme", ["light", "dark"])
async def test_axe_finds_nothing_serious_on_the_main_views(
        theme: str, server: ServerProcess, max_user: WebUser, browser: Browser) -> None:
    tid = await new_thread(max_user, "Accessibility")
    await assistant_says(max_user, tid, "Here is the **plan**, with `code` and a list:\n- one")
    call = await post_card(max_user, tid, CHOICE, TEXT, MULTI)
    await post_tool_call(max_user, tid, "ask_user_question", {"title": "broken"})
    tab = await open_app(browser, server.base_url, max_user.user_token, tid)
    page = tab.page
    await page.emulate_media(color_scheme=theme)
    await expect(page.locator("html")).to_have_attribute("data-theme", theme)
    await expect(component(page, f"{call}:q1")).to_be_visible()
    views = {"thread": await serious_violations(page)}
    await page.locator(".panel-toggle").click()  # the decisions panel
    views["decisions"] = await serious_violations(page)
    await page.locator("#notifications-button").click()  # the notifications view
    await expect(page.locator("#notifications")).to_be_visible()
    views["notifications"] = await serious_violations(page)
    await page.keyboard.press("Escape")
    await page.keyboard.press("?")
    views["shortcuts"] = await serious_violations(page)
    assert views == {k: [] for k in views}, json.dumps(views, indent=1)
    # the scan would see one: a planted button without a name is critical
    await page.keyboard.press("Escape")  # (a modal dialog makes the rest of the page inert)
    await expect(page.locator("#shortcuts")).to_be_hidden()
    await page.evaluate("() => document.querySelector('.topbar').append("
                        "document.createElement('button'))")
    planted = {v["id"] for v in await serious_violations(page)}
    assert planted == {"button-name"}, planted
    await tab.context.close()
