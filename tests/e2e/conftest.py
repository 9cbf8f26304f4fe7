"""Fixtures the WebUI's browser tests share: headless Chromium and Max on a real ``serve``."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from playwright.async_api import Browser, async_playwright

from tests.conftest import ServerProcess, start_server
from tests.e2e.webui_helpers import WebUser, launch, make_user


def _shares_a_serve(request: pytest.FixtureRequest) -> bool:
    return request.node.get_closest_marker("shared_serve") is not None


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def shared_chromium() -> AsyncIterator[Browser]:
    """One Playwright driver and one Chromium per xdist worker (`BROWSER_LOOP`, why there)."""
    async with async_playwright() as playwright:
        chromium = await launch(playwright)
        yield chromium
        await chromium.close()


@pytest_asyncio.fixture(loop_scope="session")
async def browser(shared_chromium: Browser) -> AsyncIterator[Browser]:
    """The worker's Chromium; every context the test opened is closed after it, passed or not,
    so the next test starts with no page, cookie, storage or permission of this one."""
    before = set(shared_chromium.contexts)
    yield shared_chromium
    for context in shared_chromium.contexts:
        if context not in before:
            await context.close()


@pytest.fixture
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServerProcess]:
    """A real ``maxclaw serve``: the module's shared one under ``pytest.mark.shared_serve`` (a
    start costs seconds of CPU on a 2-core machine), else one on this test's own database."""
    if _shares_a_serve(request):
        yield request.getfixturevalue("shared_server")
        return
    srv = start_server(request.getfixturevalue("database_url"), tmp_path / "serve.log")
    yield srv
    srv.stop()


@pytest_asyncio.fixture(loop_scope="session")
async def max_user(server: ServerProcess, request: pytest.FixtureRequest) -> AsyncIterator[WebUser]:
    """Max with a user and an agent token, on the test's ``server``; on a shared serve each
    test's Max is a new user, so no test reads another's rows."""
    name = f"max-{uuid.uuid4().hex[:8]}" if _shares_a_serve(request) else "max"
    who = await make_user(server.database_url, server.base_url, name)
    yield who
    await who.aclose()
