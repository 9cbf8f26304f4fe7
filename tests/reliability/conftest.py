"""Fixtures of the reliability suite, and the summary of its figures."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.reliability.figures import print_summary
from tests.reliability.support import PrivateCluster


def pytest_terminal_summary(terminalreporter: Any) -> None:
    print_summary(terminalreporter)


@pytest.fixture
def private_cluster() -> Iterator[PrivateCluster]:
    """A PostgreSQL cluster of this test's own, which it may stop and start at will.

    Its directory is outside pytest's tmp_path: that one is private to root (0700), and the
    embedded server runs PostgreSQL as an unprivileged user that must reach its data."""
    base = Path(tempfile.mkdtemp(prefix="maxclaw-own-pg-"))
    base.chmod(0o755)
    cluster = PrivateCluster(base)
    try:
        yield cluster
    finally:
        cluster.cleanup()
        shutil.rmtree(base, ignore_errors=True)
