"""The package map, enforced: which way imports go, and that no package cycle appears.

Read from the source with ``ast`` (no import side effects), every ``import`` counted, also the
ones inside functions and under ``TYPE_CHECKING``: a lazy import is still a dependency.

    client  ──▶ wire ◀── server packages          (the wire models are the only shared part)
    launchers (cli, devserver, app, composition) ──▶ anything
    api ──▶ services ──▶ stores                    (never upward)
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
ROOT = SRC / "maxclaw"
# modules that assemble or launch the process; they may import both sides and every layer
LAUNCHERS = {"maxclaw.cli", "maxclaw.devserver", "maxclaw.app", "maxclaw.composition",
             "maxclaw.__init__", "maxclaw.__main__",
             "maxclaw.secrets.cli"}  # `maxclaw secrets …`, a part of the CLI in its own file
CLIENT_SIDE = ("maxclaw.client",)
SHARED = ("maxclaw.wire",)


def module_name(path: Path) -> str:
    rel = path.relative_to(SRC).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def project_imports(path: Path) -> set[str]:
    """The ``maxclaw.*`` modules ``path`` imports (``from a import b`` counts ``a.b`` when that
    is a module, else ``a``)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("maxclaw"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            if not base.startswith("maxclaw"):
                continue
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.add(candidate if _is_module(candidate) else base)
    return found


def _is_module(name: str) -> bool:
    path = SRC.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def all_modules() -> dict[str, set[str]]:
    return {module_name(p): project_imports(p) for p in sorted(ROOT.rglob("*.py"))}


def package_of(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else module


def under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def layer(module: str) -> int | None:
    """0 store (SQL only), 1 service (rules, transactions), 2 api; None for the rest."""
    last = module.rsplit(".", 1)[-1]
    if module.startswith("maxclaw.api"):
        return 2
    if last == "store" or last.endswith("_store"):
        return 0
    if last == "service" or last.endswith("_service"):
        return 1
    return None


def test_the_map_reads_real_modules() -> None:
    modules = all_modules()
    # guards the test itself: a parser that found nothing would pass everything below
    assert "maxclaw.components.service" in modules
    assert "maxclaw.components.store" in modules["maxclaw.components.service"]
    assert "maxclaw.wire.models" in modules["maxclaw.client.http"]


def test_the_client_imports_nothing_of_the_server() -> None:
    wrong = {m: sorted(i for i in imps if not under(i, CLIENT_SIDE + SHARED))
             for m, imps in all_modules().items() if under(m, CLIENT_SIDE)}
    assert {m: i for m, i in wrong.items() if i} == {}


def test_the_server_imports_nothing_of_the_client() -> None:
    wrong = {m: sorted(i for i in imps if under(i, CLIENT_SIDE))
             for m, imps in all_modules().items()
             if not under(m, CLIENT_SIDE) and m not in LAUNCHERS}
    assert {m: i for m, i in wrong.items() if i} == {}


def test_the_wire_models_are_a_leaf() -> None:
    wrong = {m: sorted(i for i in imps if not under(i, SHARED))
             for m, imps in all_modules().items() if under(m, SHARED)}
    assert {m: i for m, i in wrong.items() if i} == {}


def test_no_module_imports_upward() -> None:
    """Stores never import services or the api; services never import the api; and only the
    launchers import the composition root."""
    wrong: dict[str, list[str]] = {}
    for module, imps in all_modules().items():
        if module in LAUNCHERS:
            continue
        mine = layer(module)
        for target in imps:
            theirs = layer(target)
            upward = mine is not None and theirs is not None and theirs > mine
            if upward or target in LAUNCHERS - {"maxclaw.__init__"}:
                wrong.setdefault(module, []).append(target)
    # the api may read the composition root's type (routes are typed with it)
    allowed = {("maxclaw.api.deps", "maxclaw.composition")}
    wrong = {m: [t for t in ts if (m, t) not in allowed] for m, ts in wrong.items()}
    assert {m: t for m, t in wrong.items() if t} == {}


def package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for module, imps in all_modules().items():
        if module in LAUNCHERS:
            continue
        src = package_of(module)
        for target in imps:
            dst = package_of(target)
            if dst != src and target not in LAUNCHERS:
                graph[src].add(dst)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one package (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                item = stack.pop()
                on_stack.discard(item)
                component.append(item)
                if item == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in list(graph):
        if node not in index:
            visit(node)
    return found


def test_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_package_cycles() -> None:
    assert cycles(package_graph()) == []


def test_card_definitions_are_a_leaf() -> None:
    """``maxclaw.cards`` depends only on the foundations, so every service may use it."""
    foundations = ("maxclaw.cards", "maxclaw.errors", "maxclaw.jsonlimits")
    wrong = {m: sorted(i for i in imps if not under(i, foundations))
             for m, imps in all_modules().items() if under(m, ("maxclaw.cards",))}
    assert {m: i for m, i in wrong.items() if i} == {}
