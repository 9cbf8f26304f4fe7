"""``serve`` hands the collector only what requests make: everything built before the first
request (modules, classes, pydantic's schemas, the routes, the app) is frozen out of its sight
(``gc.freeze``), so a full collection under load walks what requests made since, not all of
it again. Measured under the quick benchmark's load: the full collections' time 0.18 → 0.05 s
per 10 s of the server's CPU, each pause 60 → 26 ms (docs/benchmarks.md, issue 33)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from maxclaw import cli


@pytest.fixture
def unfrozen() -> Iterator[None]:
    # this test process's own objects must be collectable again after the test
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_serve_freezes_the_startup_heap_before_serving(database_url: str, unfrozen: None,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def run(app: Any, **kwargs: Any) -> None:  # uvicorn.run's place: look, do not serve
        seen["app"] = app
        seen["frozen"] = gc.get_freeze_count()

    import uvicorn

    from maxclaw import logs
    monkeypatch.setattr(uvicorn, "run", run)
    # serve's logging set-up would replace this test process's handlers for later tests
    monkeypatch.setattr(logs, "configure_logging", lambda *args, **kwargs: None)
    result = CliRunner().invoke(cli.app, ["serve", "--port", "1", "--database-url",
                                          database_url])
    assert result.exit_code == 0, result.output
    assert seen["app"] is not None
    # the app and everything imported to build it: tens of thousands of objects
    assert seen["frozen"] > 10_000
    # and the app itself is among them: frozen objects are not in the collector's lists
    assert not any(o is seen["app"] for o in gc.get_objects())
