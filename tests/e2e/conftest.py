"""Fixtures the WebUI's browser tests share: headless Chromium and Max on a real ``serve``."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from playwright.async_api import Browser, async_playwright

from tests.conftest import ServerProcess
from tests.e2e.webui_helpers import WebUser, launch, make_user


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        chromium = await launch(playwright)
        yield chromium
        await chromium.close()


@pytest.fixture
async def max_user(server: ServerProcess, database_url: str) -> AsyncIterator[WebUser]:
    """Max with a user and an agent token, on the test's ``server`` (a module that serves
    from another server overrides this fixture)."""
    who = await make_user(database_url, server.base_url)
    yield who
    await who.aclose()
