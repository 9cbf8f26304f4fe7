"""Issue 32 item 3 in headless Chromium against the real ``maxclaw serve``: "Connect an agent"
mints a thread-bound agent token, shows it once inside ready-to-paste configuration (the
Claude Code ``.mcp.json`` carries it, and it works on ``/mcp``), lists it with its thread and
last use, and revokes it after a confirmation (then ``/mcp`` refuses it); "Sign in on your
phone" makes a one-time link whose second use is refused."""

from __future__ import annotations

import json

import httpx
import pytest
from playwright.async_api import Browser, expect

from tests.conftest import ServerProcess
from tests.e2e.webui_helpers import (
    BROWSER_LOOP,
    DESKTOP,
    PHONE,
    WebUser,
    new_thread,
    open_app,
    screenshot,
)

pytestmark = [pytest.mark.browser, pytest.mark.shared_serve, BROWSER_LOOP]

MCP_HEADERS = {"Accept": "application/json, text/event-stream"}
TOOLS_LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}


async def mcp_status(base_url: str, token: str) -> int:
    async with httpx.AsyncClient(base_url=base_url, timeout=15) as client:
        resp = await client.post("/mcp", json=TOOLS_LIST, headers={
            **MCP_HEADERS, "Authorization": f"Bearer {token}"})
    return resp.status_code


async def test_connect_an_agent_mints_shows_and_revokes(
        server: ServerProcess, browser: Browser, max_user: WebUser) -> None:
    thread = await new_thread(max_user, "Refactor the parser")
    tab = await open_app(browser, server.base_url, max_user.user_token, thread)
    page = tab.page
    await page.locator("#connect-button").click()
    dialog = page.locator("#connect")
    await expect(dialog).to_be_visible()
    await expect(dialog.locator("#connect-thread")).to_have_value(thread)
    await dialog.locator("#connect-name").fill("Claude Code on the laptop")
    await dialog.locator("#connect-mint").click()

    token = (await dialog.locator("#minted-token").text_content() or "").strip()
    assert token.startswith("mc_a_")
    snippets = dialog.locator('pre.snippet-text[data-host="claude-code"]')
    await expect(snippets).to_have_count(2)
    mcp_json = json.loads(await snippets.nth(0).text_content() or "")
    server_entry = mcp_json["mcpServers"]["maxclaw"]
    assert server_entry == {"type": "http", "url": f"{server.base_url}/mcp",
                            "headers": {"Authorization": f"Bearer {token}"}}
    settings = json.loads(await snippets.nth(1).text_content() or "")
    assert settings["env"] == {"MAXCLAW_URL": server.base_url, "MAXCLAW_TOKEN": token,
                               "MAXCLAW_THREAD": thread}
    assert set(settings["hooks"]) == {"SessionStart", "UserPromptSubmit", "PostToolUse", "Stop"}
    await screenshot(page, "connect-minted")
    # the pasted configuration works: the token answers on /mcp
    assert await mcp_status(server.base_url, token) == 200

    # every other host's configuration carries the same server and token
    expected = {"codex": 'bearer_token_env_var = "MAXCLAW_TOKEN"',
                "cursor": '"Authorization": "Bearer ', "openai-agents": "MCPServerStreamableHttp",
                "langgraph": "MultiServerMCPClient", "bridge": f"--thread {thread}"}
    for host, marker in expected.items():
        await dialog.locator("#connect-host-after").select_option(host)
        text = await dialog.locator(f'pre.snippet-text[data-host="{host}"]').all_text_contents()
        joined = "\n".join(text)
        assert marker in joined and token in joined, (host, joined)
        assert f"{server.base_url}/mcp" in joined or host == "bridge", (host, joined)

    # the list names the thread and the last use (the /mcp call above stamped it)
    await dialog.locator("#connect-another").click()
    await expect(dialog.locator("#minted-token")).to_have_count(0)
    listed = await max_user.user.get("/v1/tokens")
    minted = next(t for t in listed.json()["tokens"]
                  if t.get("name") == "Claude Code on the laptop")
    item = dialog.locator(f'.token-item[data-token-id="{minted["id"]}"]')
    await expect(item).to_contain_text("Refactor the parser")
    await expect(item).to_contain_text("last used")
    assert token not in await page.content()  # shown once: gone from the page

    # revoke asks first; "Keep" changes nothing
    await item.locator("button.revoke").click()
    await item.get_by_role("button", name="Keep").click()
    assert await mcp_status(server.base_url, token) == 200
    await item.locator("button.revoke").click()
    await screenshot(page, "connect-revoke-confirm")
    await item.get_by_role("button", name="Revoke it now").click()
    await expect(item).to_have_count(0)
    assert await mcp_status(server.base_url, token) == 401
    assert not tab.errors, tab.errors
    await tab.context.close()


async def test_phone_signin_link_works_once(
        server: ServerProcess, browser: Browser, max_user: WebUser) -> None:
    tab = await open_app(browser, server.base_url, max_user.user_token)
    await tab.page.locator("#phone-button").click()
    dialog = tab.page.locator("#phone-signin")
    await expect(dialog.locator("#phone-qr")).to_be_visible()
    link = (await dialog.locator("#phone-link").text_content() or "").strip()
    assert link.startswith(f"{server.base_url}/#signin=mc_s_")
    assert max_user.user_token not in link
    # the QR image decodes as an image the browser drew (not a broken one)
    width = await dialog.locator("#phone-qr").evaluate("img => img.naturalWidth")
    assert width > 100
    await screenshot(tab.page, "phone-signin-qr")

    # the phone: a fresh profile opens the link, is asked, and is signed in as Max
    phone = await browser.new_context(viewport=PHONE)
    page = await phone.new_page()
    await page.goto(link)
    assert "signin=" not in page.url
    await page.locator("#code-go").click()
    await expect(page.locator(".conn")).to_have_attribute("data-state", "online")
    assert page.url.endswith(f"#/t/{max_user.main_thread_id}")  # Max's own Main thread
    phone_token = await page.evaluate("localStorage.getItem('maxclaw.token')")
    assert phone_token and phone_token.startswith("mc_u_")
    assert phone_token != max_user.user_token  # a token of the phone's own
    async with httpx.AsyncClient(base_url=server.base_url, timeout=15) as client:
        me = await client.get("/v1/me", headers={"Authorization": f"Bearer {phone_token}"})
    assert me.json()["user_id"] == max_user.user_id
    await screenshot(page, "phone-signed-in")
    await phone.close()

    # a second use of the same link is refused, and the device stays signed out
    again = await browser.new_context(viewport=DESKTOP)
    page = await again.new_page()
    await page.goto(link)
    await page.locator("#code-go").click()
    await expect(page.locator("#signin-code .error")).to_contain_text("already used")
    assert await page.evaluate("localStorage.getItem('maxclaw.token')") is None
    await again.close()
    assert not tab.errors, tab.errors
    await tab.context.close()
