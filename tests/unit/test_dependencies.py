"""No dead dependencies: every package the project declares is used, and says where.

A declared package nobody imports or runs still costs every install and every CVE review;
``testcontainers`` sat in the test extra unused until this test. Each entry below names how the
package is used — a module some file imports, or a tool a command runs — and the test checks
that use exists in the repository."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CODE_DIRS = ("src", "tests", "bench", "scripts")
# package -> ("import", module) found in code, or ("tool", text) found in the CI/Make files
USED_AS: dict[str, tuple[str, str]] = {
    "pytest": ("import", "pytest"),
    "pytest-asyncio": ("tool", "asyncio_mode"),  # a plugin: configured in pyproject
    "pytest-xdist": ("tool", "-n auto"),
    "pytest-timeout": ("tool", "timeout ="),
    "hypothesis": ("import", "hypothesis"),
    "playwright": ("import", "playwright"),
    "schemathesis": ("import", "schemathesis"),
    "mypy": ("tool", "mypy src"),
    "ruff": ("tool", "ruff check"),
    "matplotlib": ("import", "matplotlib"),
    "psutil": ("import", "psutil"),
    "pyinstrument": ("import", "pyinstrument"),
    "py-spy": ("tool", "py-spy"),
}
TOOL_FILES = ("Makefile", ".ci/run", "pyproject.toml", "bench/profile.py")


def declared(extra: str) -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = project["optional-dependencies"][extra]
    return [re.split(r"[\[<>=~! ;]", spec, maxsplit=1)[0] for spec in specs]


def code_text() -> str:
    return "\n".join(p.read_text(errors="replace") for d in CODE_DIRS
                     for p in (ROOT / d).rglob("*.py") if ".venv" not in p.parts)


def test_every_test_dependency_says_how_it_is_used() -> None:
    assert sorted(set(declared("test")) - set(USED_AS)) == []


def test_every_declared_use_exists() -> None:
    code = code_text()
    tools = "\n".join((ROOT / f).read_text() for f in TOOL_FILES if (ROOT / f).exists())
    missing = []
    for package in declared("test"):
        how, what = USED_AS[package]
        found = (re.search(rf"^\s*(import|from) {re.escape(what)}\b", code, re.MULTILINE)
                 if how == "import" else what in tools)
        if not found:
            missing.append(package)
    assert missing == []
