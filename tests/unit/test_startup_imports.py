"""What a ``serve`` start imports: SQLAlchemy and alembic are for migrations and the schema's
declaration, not for serving. Each start of the app paid ~0.3 s of CPU for them (and every
``maxclaw`` command ~0.45 s for alembic's no-op upgrade): docs/benchmarks.md, issue 33 item 4,
fifth pass."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = ("import json, sys, maxclaw.app;"
         " print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))")


def test_the_app_imports_neither_sqlalchemy_nor_alembic() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    loaded = set(json.loads(out))
    assert "maxclaw" in loaded and "fastapi" in loaded  # the probe imported the app
    assert not loaded & {"sqlalchemy", "alembic"}
