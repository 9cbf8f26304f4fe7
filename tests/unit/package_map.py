"""The package map read from the source, and the rules ``tests/unit/test_architecture.py``
holds it to: which layer imports which, the package graph (imports, and the dependencies a
Protocol hides), its cycles, and the documents the code and the docs cite.

Read with ``ast`` (no import side effects), every ``import`` counted, also the ones inside
functions and under ``TYPE_CHECKING``: a lazy import is still a dependency. Each rule is a
function of source text, so the test runs it on a made-up bad example as well as on the tree.
"""

from __future__ import annotations

import ast
import os
import posixpath
import re
from collections import defaultdict
from collections.abc import Collection
from pathlib import Path

from tests.unit.layers import SERVER_RANKS, SIDES

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src"
ROOT = SRC / "maxclaw"
Sources = dict[str, str]  # module name -> its source text
Graph = dict[str, set[str]]


def module_name(path: Path) -> str:
    rel = path.relative_to(SRC).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def read_sources() -> Sources:
    return {module_name(p): p.read_text() for p in sorted(ROOT.rglob("*.py"))}


def is_package(module: str, sources: Sources) -> bool:
    return any(other.startswith(module + ".") for other in sources)


def imports_of(module: str, sources: Sources) -> set[str]:
    """The project modules ``module`` imports (``from a import b`` counts ``a.b`` when that
    is a module, else ``a``)."""
    tree = ast.parse(sources[module])
    found: set[str] = set()
    package = module if is_package(module, sources) else module.rsplit(".", 1)[0]
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
                found.add(candidate if candidate in sources else base)
    return found


def import_graph(sources: Sources) -> Graph:
    return {m: imports_of(m, sources) for m in sources}


def package_of(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else module


def under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def declaration_problems(modules: set[str], layers: dict[str, str]) -> list[str]:
    """Modules without a layer, lines for modules that do not exist, unknown layer names."""
    known = SERVER_RANKS.keys() | SIDES
    return ([f"{m}: no declared layer (add it to tests/unit/layers.py)"
             for m in sorted(modules - layers.keys())]
            + [f"{m}: declared but not in src" for m in sorted(layers.keys() - modules)]
            + [f"{m}: unknown layer {v!r}" for m, v in sorted(layers.items())
               if v not in known])


def import_problems(graph: Graph, layers: dict[str, str],
                    allowed: Collection[tuple[str, str]] = ()) -> dict[str, list[str]]:
    """``{module: [imports against the map]}``: a server module importing a higher layer, the
    client or a launcher; the client importing anything but itself and ``wire``; ``wire``
    importing anything but itself. Launchers may import anything, and so may the pairs of
    ``allowed``."""
    wrong: dict[str, list[str]] = {}
    for module, imports in graph.items():
        mine = layers.get(module)
        if mine is None or mine == "launcher":
            continue
        for target in sorted(imports):
            theirs = layers.get(target)
            if theirs is None or (module, target) in allowed:
                continue
            if mine in SIDES:
                bad = theirs not in (mine, "wire")
            else:
                bad = theirs == "client" or (theirs != "wire"
                                             and SERVER_RANKS[theirs] > SERVER_RANKS[mine])
            if bad:
                wrong.setdefault(module, []).append(f"{target} ({theirs})")
    return wrong


def _names_in(annotation: ast.expr | None) -> set[str]:
    """The names an annotation mentions (quoted annotations parsed too)."""
    if annotation is None:
        return set()
    found: set[str] = set()
    for node in ast.walk(annotation):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                found |= _names_in(ast.parse(node.value, mode="eval").body)
            except SyntaxError:
                continue
    return found


def _members(cls: ast.ClassDef) -> set[str]:
    return {n.name for n in cls.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
            and not n.name.startswith("__")} | {
        n.target.id for n in cls.body
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}


def _is_protocol(cls: ast.ClassDef) -> bool:
    return any(_names_in(base) & {"Protocol"} for base in cls.bases)


def parameter_types(tree: ast.Module) -> set[str]:
    """Every name in a parameter annotation of any function or method (``__init__`` too)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            a = node.args
            for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg):
                found |= _names_in(arg.annotation if arg else None)
    return found


def protocol_edges(sources: Sources, graph: Graph,
                   layers: dict[str, str]) -> set[tuple[str, str, str]]:
    """``(user package, satisfier package, protocol)``: a module takes a parameter typed with
    a Protocol (its own or one it imports), and a class of a service in another package has
    every member of it. The import graph does not show that dependency; the call does."""
    trees = {m: ast.parse(s) for m, s in sources.items()}
    protocols = {(m, c.name): _members(c) for m, t in trees.items() for c in t.body
                 if isinstance(c, ast.ClassDef) and _is_protocol(c) and _members(c)}
    services = [(m, c.name, _members(c)) for m, t in trees.items() for c in t.body
                if isinstance(c, ast.ClassDef) and not _is_protocol(c)
                and layers.get(m) in ("service", "surface")]
    edges: set[tuple[str, str, str]] = set()
    for user, tree in trees.items():
        if layers.get(user) == "launcher":
            continue
        typed = parameter_types(tree)
        for (home, name), needed in protocols.items():
            if name not in typed or not (user == home or home in graph.get(user, set())):
                continue
            edges |= {(package_of(user), package_of(m), f"{home}.{name}")
                      for m, _, members in services
                      if needed <= members
                      and package_of(m) not in (package_of(user), package_of(home))}
    return edges


def package_graph(sources: Sources, graph: Graph, layers: dict[str, str]) -> Graph:
    """Package → packages it depends on: its imports, and the services it reaches through a
    Protocol. Launchers assemble everything and are left out."""
    packages: Graph = defaultdict(set)
    for module, imports in graph.items():
        if layers.get(module) == "launcher":
            continue
        packages[package_of(module)] |= {package_of(t) for t in imports
                                         if layers.get(t) != "launcher"}
    for user, satisfier, _ in protocol_edges(sources, graph, layers):
        packages[user].add(satisfier)
    for package, targets in packages.items():
        targets.discard(package)
    return packages


def cycles(graph: Graph) -> list[list[str]]:
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
        for nxt in sorted(graph.get(node, ())):
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

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


# where citations are read: the code, its tests, the docs, the migrations and the benchmarks
CITING = ("README.md", "src", "tests", "docs", "alembic", "bench")
_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+")
_MD = re.compile(r"(?<![\w.-])[\w./-]*\w\.md(?![\w-])")


def cited_documents(text: str) -> list[str]:
    """The ``*.md`` paths a text names (anchors dropped, addresses on the web skipped)."""
    return _MD.findall(_URL.sub(" ", text))


def resolve(citing: str, cited: str, exists: set[str]) -> str | None:
    """The repository path ``cited`` names when ``citing`` (a repository path) names it: as
    written from the root, relative to the citing file, or, a bare name, in docs/. None when it
    names nothing in the repository (``../shared/…`` leaves it)."""
    candidates = [cited, posixpath.join(posixpath.dirname(citing), cited)]
    if "/" not in cited:
        candidates.append(f"docs/{cited}")
    for candidate in candidates:
        path = posixpath.normpath(candidate)
        if not path.startswith("../") and not posixpath.isabs(path) and path in exists:
            return path
    return None


def missing_citations(texts: dict[str, str], exists: set[str]) -> list[str]:
    """``"file: cited"`` for each citation in ``texts`` (repository path → text) that names no
    file of ``exists`` (repository paths)."""
    return sorted({f"{path}: {cited}" for path, text in texts.items()
                   for cited in cited_documents(text)
                   if resolve(path, cited, exists) is None})


def repository_texts(leave_out: Path) -> tuple[dict[str, str], set[str]]:
    """The citing texts (repository path → text), but ``leave_out``, and every document."""
    files = [p for top in CITING for p in ([REPO / top] if (REPO / top).is_file()
                                           else sorted((REPO / top).rglob("*")))
             if p.is_file() and "__pycache__" not in p.parts]
    texts: dict[str, str] = {}
    files.remove(leave_out)
    for path in files:
        try:
            texts[path.relative_to(REPO).as_posix()] = path.read_text()
        except UnicodeDecodeError:
            continue  # an image
    return texts, repository_documents()


def repository_documents() -> set[str]:
    """Every ``*.md`` of the checkout, hidden folders (.git, .venv) and caches left out."""
    found: set[str] = set()
    for folder, subfolders, names in os.walk(REPO):
        subfolders[:] = [d for d in subfolders
                         if not d.startswith(".") and d not in ("node_modules", "__pycache__")]
        rel = Path(folder).relative_to(REPO)
        found |= {(rel / n).as_posix() for n in names if n.endswith(".md")}
    return found
