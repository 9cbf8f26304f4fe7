"""Print the reliability figures when only this folder runs."""

from __future__ import annotations

from typing import Any

from tests.reliability.figures import print_summary


def pytest_terminal_summary(terminalreporter: Any) -> None:
    print_summary(terminalreporter)
