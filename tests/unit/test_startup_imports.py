"""What a ``serve`` start imports: SQLAlchemy and alembic are for migrations and the schema's
declaration, not for serving; aiohttp, aioapns and pywebpush (with requests) are for sending
pushes, and load at the first push. Every start of the app paid ~0.3 s of CPU for each group
(and every ``maxclaw`` command ~0.45 s for alembic's no-op upgrade): docs/benchmarks.md, issue
33 item 4, fifth pass."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = ("import json, sys, maxclaw.app;"
         " print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))")


def test_the_app_imports_no_migration_tool_and_no_push_library() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    loaded = set(json.loads(out))
    assert "maxclaw" in loaded and "fastapi" in loaded  # the probe imported the app
    assert not loaded & {"sqlalchemy", "alembic"}
    # the push libraries load at the first push of their kind (push/adapters/*.py)
    assert not loaded & {"aiohttp", "aioapns", "pywebpush", "requests"}
