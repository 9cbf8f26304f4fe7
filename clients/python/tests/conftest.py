"""The MaxClaw checkout's test fixtures (a real PostgreSQL, ``maxclaw serve`` subprocesses),
and this library's source on the path for the tests that import it in-process (the project's
venv does not install it; the README example runs under the venv that does)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tests.conftest import *  # noqa: F403
