"""``api/lean.py`` stands on the frameworks' public APIs only: no import of a private module
or name of FastAPI, Starlette or pydantic (their internals move between releases)."""

from __future__ import annotations

import ast
from pathlib import Path

LEAN = Path(__file__).resolve().parents[2] / "src" / "maxclaw" / "api" / "lean.py"
FRAMEWORKS = ("fastapi", "starlette", "pydantic")


def private_imports(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module + "." + a.name for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] in FRAMEWORKS and any(p.startswith("_") for p in parts):
                found.append(name)
    return found


def test_the_check_sees_a_private_import() -> None:
    assert private_imports("from fastapi._compat import Undefined\n"
                           "import starlette._utils\n") == ["fastapi._compat.Undefined",
                                                            "starlette._utils"]


def test_lean_imports_nothing_private() -> None:
    assert private_imports(LEAN.read_text(encoding="utf-8")) == []
