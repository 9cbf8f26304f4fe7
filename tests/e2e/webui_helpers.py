"""Helpers for the WebUI browser tests: Debian's Chromium driven by Playwright (never a
downloaded browser), users made against the server's own database, cards seeded the way an
agent runtime posts them, and screenshots kept under ``test-artifacts/webui/``."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import (
    Browser,
    BrowserContext,
    Page,
    Playwright,
    ViewportSize,
    expect,
)

from maxclaw.auth.service import AuthService, Principal
from maxclaw.composition import Services, build_services
from maxclaw.db.database import Database
from maxclaw.metrics import Metrics
from maxclaw.settings import Settings
from tests.conftest import Actor
from tests.local_http import LOCAL_TLS

CHROMIUM = "/usr/bin/chromium"
# The browser tests run on one event loop per xdist worker, so they share one Playwright driver
# and one Chromium (`tests/e2e/conftest.py`, `shared_chromium`): a driver is a Node.js process
# that cost ~2 s of CPU to start, and 26 of them plus their Chromiums were ~14% of `make
# test`'s CPU (docs/benchmarks.md, issue 33 item 4, fifth pass). Each test still gets browser
# contexts of its own (closed after it), so no cookie, storage or permission carries over.
BROWSER_LOOP = pytest.mark.asyncio(loop_scope="session")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync"]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "webui"
DESKTOP: ViewportSize = {"width": 1280, "height": 860}
PHONE: ViewportSize = {"width": 390, "height": 844}

CHOICE = {"id": "q1", "kind": "choice", "question": "Keep the old field for one version?",
          "options": [{"id": "keep", "label": "Keep one version", "recommended": True},
                      {"id": "drop", "label": "Remove it now"}],
          "multiple": False, "allow_other": True}
TEXT = {"id": "q2", "kind": "text", "question": "Anything for the changelog?"}
SECRET = {"id": "q3", "kind": "secret", "question": "Paste the deploy token"}
DIFF = ("--- a/models.py\n+++ b/models.py\n@@ -1,3 +1,3 @@\n class Job:\n"
        "-    status: str\n+    state: str\n     name: str\n")
OBJECT = {"id": "q4", "kind": "object", "question": "Apply this diff?",
          "object": {"type": "diff", "content": DIFF},
          "actions": [{"id": "apply", "label": "Apply"}, {"id": "reject", "label": "Reject"}]}


async def launch(playwright: Playwright) -> Browser:
    """Headless Debian Chromium; Playwright's own browser download is never used."""
    return await playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                            args=CHROMIUM_ARGS)


@dataclass
class WebUser(Actor):
    """An ``Actor`` whose HTTP clients talk to a real ``maxclaw serve``."""

    @property
    def principal(self) -> Principal:
        return Principal(user_id=self.user_id, name=self.name, role="user")

    async def aclose(self) -> None:
        await self.user.aclose()
        await self.agent.aclose()


async def make_user(database_url: str, base_url: str, name: str = "max") -> WebUser:
    """Create the user and two tokens in the server's database (what the CLI does)."""
    db = Database(database_url, min_size=1, max_size=2)
    await db.open()
    try:
        auth = AuthService(db)
        user_id, main_id = await auth.create_user(name)
        user_token = await auth.create_token(name, "user")
        # made for Main: these tests play Main's tools too (issue 14's fence)
        agent_token = await auth.create_token(name, "agent", for_main=True)
    finally:
        await db.close()

    def client(token: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=base_url, timeout=15, verify=LOCAL_TLS,
                                 headers={"Authorization": f"Bearer {token}"})

    return WebUser(name, user_id, main_id, user_token, agent_token, client(user_token),
                   client(agent_token))


@asynccontextmanager
async def offline_services(database_url: str) -> AsyncIterator[Services]:
    """The service layer on the database, without a server (to change things while it is down)."""
    db = Database(database_url, min_size=1, max_size=2)
    await db.open()
    try:
        yield build_services(Settings(database_url=database_url), db, Metrics())
    finally:
        await db.close()


# ---- seeding, the way an agent runtime does it ---------------------------------------------

async def new_thread(who: WebUser, title: str, **fields: Any) -> str:
    resp = await who.user.post("/v1/threads", json={"title": title, **fields})
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


async def post_tool_call(who: WebUser, thread_id: str, name: str, args: dict[str, Any],
                         content: str | None = None) -> str:
    """An assistant row carrying one tool call (OpenAI shape); returns the call id."""
    call_id = f"call_{uuid.uuid4().hex[:10]}"
    resp = await who.agent.post(f"/v1/agent/threads/{thread_id}/messages", json={
        "role": "assistant", "content": content,
        "tool_calls": [{"id": call_id, "type": "function",
                        "function": {"name": name, "arguments": json.dumps(args)}}]})
    assert resp.status_code == 201, resp.text
    return call_id


async def execute(who: WebUser, thread_id: str, call_id: str) -> httpx.Response:
    return await who.agent.post(f"/v1/agent/threads/{thread_id}/tool-calls/{call_id}/execute")


async def post_card(who: WebUser, thread_id: str, *questions: dict[str, Any],
                    title: str = "Rename the status field",
                    content: str | None = "I need a decision before I go on.",
                    **card: Any) -> str:
    """Ask a card (assistant row, then execute); returns the tool call id."""
    args = {"title": title, "questions": list(questions), **card}
    call_id = await post_tool_call(who, thread_id, "ask_user_question", args, content=content)
    resp = await execute(who, thread_id, call_id)
    assert resp.status_code == 200, resp.text
    assert resp.json()["content"]["posted"] is True, resp.text
    return call_id


async def answer_for_max(who: WebUser, component_id: str, selected: list[str],
                         reason: str) -> httpx.Response:
    """Main's runtime answers a with-main card in the Main thread."""
    call_id = await post_tool_call(who, who.main_thread_id, "answer_for_max", {
        "component_id": component_id, "selected": selected, "text": None, "reason": reason})
    return await execute(who, who.main_thread_id, call_id)


async def hand_back(who: WebUser, component_id: str, note: str) -> httpx.Response:
    """Main's runtime hands a with-main card back to Max."""
    call_id = await post_tool_call(who, who.main_thread_id, "hand_back",
                                   {"component_id": component_id, "note": note})
    return await execute(who, who.main_thread_id, call_id)


async def open_decisions(who: WebUser) -> list[dict[str, Any]]:
    resp = await who.user.get("/v1/decisions")
    assert resp.status_code == 200, resp.text
    decisions: list[dict[str, Any]] = resp.json()["decisions"]
    return decisions


# ---- the browser side ----------------------------------------------------------------------

@dataclass
class Tab:
    """One browser context (a separate device, as far as the server can tell) and its page."""

    context: BrowserContext
    page: Page
    errors: list[str]
    requests: list[str]


async def follow_link(page: Page, base_url: str, token: str) -> None:
    """Open a ``#token=`` link and accept the prompt naming its account (a link always asks
    before it signs a browser in: tests/trust/test_token_link_asks.py); none is shown when the
    browser is already signed in with that token."""
    await page.goto(f"{base_url}/#token={token}")
    await page.locator("#link-go, .conn").first.wait_for()
    if await page.locator("#link-go").count():
        await page.locator("#link-go").click()


async def open_app(browser: Browser, base_url: str, token: str, thread_id: str | None = None,
                   viewport: ViewportSize | None = None) -> Tab:
    """Sign in through a ``#token=`` link, open the thread, wait until the page is live."""
    context = await browser.new_context(viewport=viewport or DESKTOP)
    page = await context.new_page()
    errors: list[str] = []
    requests: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("request", lambda request: requests.append(request.url))
    await follow_link(page, base_url, token)
    await expect(page.locator(".conn")).to_have_attribute("data-state", "online")
    if thread_id:
        await page.goto(f"{base_url}/#/t/{thread_id}")
        await expect(page.locator(f'.thread-item[data-thread-id="{thread_id}"]')) \
            .to_have_attribute("aria-current", "page")
    return Tab(context, page, errors, requests)


def component(page: Page, component_id: str) -> Any:
    """The card component's element in the timeline."""
    return page.locator(f'#timeline [data-component-id="{component_id}"]')


def panel_decision(page: Page, component_id: str) -> Any:
    return page.locator(f'#decisions [data-component-id="{component_id}"]')


async def everything_in_dom(page: Page) -> str:
    """The page's HTML plus every form field's current value (values are not in the HTML)."""
    html = await page.content()
    values = await page.evaluate(
        "() => [...document.querySelectorAll('input, textarea, select')].map(e => e.value)")
    return html + "\n" + json.dumps(values)


async def screenshot(page: Page, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    await page.screenshot(path=str(path))
    return path
