"""Dependencies as declared, both ways: every package the project declares is used (and says
where), and every package the code imports is declared.

A declared package nobody imports or runs still costs every install and every CVE review;
``testcontainers`` sat in the test extra unused until this test. Each entry below names how the
package is used — a module some file imports, or a tool a command runs — and the test checks
that use exists in the repository. The other way, an import nobody declared works only where
something else happened to install it (``httpx2``, ``mcp_types`` and ``py_vapid`` came in with
other packages; a clean install broke on them): every third-party module imported anywhere in
``src`` (the package's own dependencies), ``tests`` (plus the test extra), ``scripts`` (plus
the scripts extra) or ``bench`` (plus the bench extra) must belong to a declared distribution.
"""

from __future__ import annotations

import ast
import functools
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

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
    "psutil": ("import", "psutil"),
    "h2": ("import", "h2"),
    "http-ece": ("import", "http_ece"),
    "pyjwt": ("import", "jwt"),
    "jsonschema": ("import", "jsonschema"),
    "kubernetes-validate": ("import", "kubernetes_validate"),
    "axe-playwright-python": ("import", "axe_playwright_python"),  # its bundled axe.min.js
    "maxclaw": ("import", "opentelemetry"),  # maxclaw[tracing]: tests/trust/test_tracing.py
}
# the extras a directory's code may use besides the package's own dependencies
# (src/maxclaw/tracing.py imports its extra only when MAXCLAW_TRACING turns it on)
EXTRAS_OF = {"src": ("tracing",), "tests": ("test", "tracing"), "scripts": ("test", "scripts"),
             "bench": ("test", "bench")}
FIRST_PARTY = frozenset({"maxclaw", "tests", "bench", "scripts", "__future__"})
# import name -> distribution, for the few whose names differ and that may not be installed
# where the test runs (the bench extra in a clean CI venv)
DISTRIBUTION_OF = {"PIL": "pillow", "yaml": "pyyaml", "jwt": "pyjwt",
                   "psycopg_pool": "psycopg-pool"}
TOOL_FILES = ("Makefile", ".ci/run", "pyproject.toml", "bench/profile.py")


def _names(specs: list[str]) -> list[str]:
    return [re.split(r"[\[<>=~! ;]", spec, maxsplit=1)[0] for spec in specs]


def declared(extra: str | None) -> list[str]:
    """The distributions of an extra, or (None) the package's own dependencies."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    if extra is None:
        return _names(project["dependencies"])
    return _names(project["optional-dependencies"][extra])


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def third_party_imports(root: Path, directory: str) -> dict[str, set[str]]:
    """Top-level module -> the files importing it (absolute imports anywhere in a file,
    inside functions and ``TYPE_CHECKING`` blocks too), without the standard library's."""
    found: dict[str, set[str]] = {}
    for path in (root / directory).rglob("*.py"):
        if ".venv" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                top = module.split(".")[0]
                if top not in sys.stdlib_module_names and top not in FIRST_PARTY:
                    found.setdefault(top, set()).add(str(path.relative_to(root)))
    return found


@functools.cache
def installed() -> dict[str, list[str]]:
    return packages_distributions()  # reads every installed distribution's file list: once


def distributions_of(module: str) -> set[str]:
    """Every distribution that could provide ``module``: what is installed says, else the
    known name, else the module's own name."""
    names = set(installed().get(module, ()))
    names.add(DISTRIBUTION_OF.get(module, module))
    return {normalized(n) for n in names}


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



def undeclared_imports(root: Path, directory: str) -> dict[str, list[str]]:
    """Modules ``root/directory`` imports that no distribution it may use provides."""
    allowed = {normalized(n) for extra in (None, *EXTRAS_OF[directory])
               for n in declared(extra)}
    return {module: sorted(files)[:3]
            for module, files in third_party_imports(root, directory).items()
            if not distributions_of(module) & allowed}


@pytest.mark.parametrize("directory", sorted(EXTRAS_OF))
def test_every_import_is_declared(directory: str) -> None:
    undeclared = undeclared_imports(ROOT, directory)
    assert undeclared == {}, (f"{directory}/ imports packages pyproject.toml does not declare "
                              f"for it: {undeclared}")


def test_the_check_sees_an_undeclared_import(tmp_path: Path) -> None:
    """The check itself can fail: a function-level import of a package nobody declared."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "x.py").write_text(
        "import asyncpg\n\ndef f():\n    from leftpad_undeclared.sub import pad\n")
    assert undeclared_imports(tmp_path, "src") == {"leftpad_undeclared": ["src/x.py"]}
