"""The package map, enforced: which way imports go, and that no package cycle appears.

Read from the source with ``ast`` (no import side effects), every ``import`` counted, also the
ones inside functions and under ``TYPE_CHECKING``: a lazy import is still a dependency.

    client  ──▶ wire ◀── server packages          (the wire models are the only shared part)
    launchers (cli, devserver, app, composition) ──▶ anything
    api ──▶ services ──▶ stores                    (never upward)
"""

from __future__ import annotations

import ast
import re
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


# ----- typed rows at the store boundary -----

# Store functions annotated with ``Any`` or ``asyncpg.Record`` (in what they return or take),
# each with the reason it is left: none today. Every public store function returns typed rows
# (``maxclaw.db.rows``) or plain values, so mypy sees the columns the services read; a new
# exception needs a stated reason here.
UNTYPED_STORE_FUNCTIONS: dict[str, str] = {}
_UNTYPED = re.compile(r"\bAny\b|\bRecord\b")


def store_modules() -> list[Path]:
    return [p for p in sorted(ROOT.rglob("*.py")) if layer(module_name(p)) == 0]


def untyped_store_functions() -> set[str]:
    """``module.function`` of every public store function whose signature names ``Any`` or
    ``asyncpg.Record`` in its return type or a parameter."""
    found: set[str] = set()
    for path in store_modules():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            if node.name.startswith("_"):
                continue
            args = node.args
            annotations = [node.returns] + [a.annotation for a in (
                *args.posonlyargs, *args.args, *args.kwonlyargs)]
            if any(a is not None and _UNTYPED.search(ast.unparse(a)) for a in annotations):
                found.add(f"{module_name(path)}.{node.name}")
    return found


def test_the_row_check_reads_real_stores() -> None:
    stores = {module_name(p) for p in store_modules()}
    # guards the test itself: a walk that found no store would pass everything below
    assert {"maxclaw.components.store", "maxclaw.timeline.store", "maxclaw.secrets.store",
            "maxclaw.push.action_token_store"} <= stores
    assert _UNTYPED.search("list[dict[str, Any]]") and _UNTYPED.search("asyncpg.Record | None")
    assert not _UNTYPED.search("list[MessageRow]")


def test_store_functions_return_typed_rows() -> None:
    """No store function returns (or takes) ``dict[str, Any]``, ``Any`` or ``asyncpg.Record``
    except the listed ones; and the list holds no function that has since been typed."""
    untyped = untyped_store_functions()
    assert sorted(untyped - UNTYPED_STORE_FUNCTIONS.keys()) == []
    assert sorted(UNTYPED_STORE_FUNCTIONS.keys() - untyped) == []


# ----- whole statements, one parameter convention -----

# Statements not (yet) written by the rules below, each with its reason. Every one is in a
# package another change owns at the time of writing (issue 13's item 5 reached the stores of
# components, decisions and push, and the agent threads'); move it out of this list when its
# store follows the rules.
STATEMENT_EXCEPTIONS: dict[str, str] = {
    "maxclaw.auth.store.DELETE_TOKEN":
        "$2 is an optional user (NULL: an operator deletes any user's token); auth's to change",
    "maxclaw.push.action_token_store.CONSUME": "$1 is the token id; action tokens' to change",
    "maxclaw.push.action_token_store.REVOKE_FOR_DECISION":
        "$1 is the decision id; action tokens' to change",
    "maxclaw.turns.store.START_TURN": "$6 is the user; the turn store's to change",
    "maxclaw.turns.store.MODEL_WINDOW": "interpolates the window size _SIZE; turns' to change",
    "maxclaw.realtime.store.READ_THREADS":
        "interpolates the shared cursor predicate _AFTER; realtime's to change",
    "maxclaw.realtime.store.READ_MESSAGES": "as READ_THREADS",
    "maxclaw.realtime.store.READ_DECISIONS": "as READ_THREADS",
}
# a statement is SQL text that starts (after comments and blank lines) with one of these
_STATEMENT = re.compile(r"\A\s*(?:--[^\n]*\n\s*)*(?:WITH|SELECT|INSERT|UPDATE|DELETE)\b")
# ``user_id = $N`` (any alias, any cast) or ``$N = user_id``: a filter on the user
_USER_FILTER = re.compile(r"\buser_id\s*=\s*\$(\d+)\b|\$(\d+)(?:::\w+)?\s*=\s*(?:\w+\.)?user_id\b")
# the one interpolation a statement may hold: a column list, itself a literal (``*_COLUMNS``)
_COLUMN_LIST = re.compile(r"\w*COLUMNS")


def _literal_text(node: ast.expr) -> str | None:
    """The SQL text of a literal or an f-string (its interpolations as ``{name}``); None for
    anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else f"{{{ast.unparse(v.value)}}}"
                       for v in node.values if isinstance(v, ast.Constant | ast.FormattedValue))
    return None


def _strings_in(node: ast.expr) -> list[str]:
    return [t for n in ast.walk(node) if isinstance(n, ast.expr)
            and (t := _literal_text(n)) is not None]


def statement_problems(source: str) -> dict[str, list[str]]:
    """``{constant: [problems]}`` for the module-level SQL constants of a store's source:
    a statement assembled with ``+``, ``%``, ``.format``, ``.join`` or any other call, an
    f-string interpolating anything but a column list, and a filter ``user_id = $N`` with
    N ≠ 1 (every store's statements take the user as ``$1``)."""
    found: dict[str, list[str]] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        names = [t.id for t in targets if isinstance(t, ast.Name) and t.id.isupper()]
        texts = _strings_in(value)
        if not names or not any(_STATEMENT.match(t) for t in texts):
            continue
        problems: list[str] = []
        text = _literal_text(value)
        if text is None:
            problems.append(f"assembled ({type(value).__name__}): write it out whole")
        elif isinstance(value, ast.JoinedStr):
            problems += [f"interpolates {ast.unparse(v.value)}" for v in value.values
                         if isinstance(v, ast.FormattedValue)
                         and not (isinstance(v.value, ast.Name)
                                  and _COLUMN_LIST.fullmatch(v.value.id))]
        for t in texts:
            problems += sorted({f"user_id = ${m[0] or m[1]}" for m in _USER_FILTER.findall(t)
                                if (m[0] or m[1]) != "1"})
        if problems:
            found.update({n: problems for n in names})
    return found


def test_the_statement_check_finds_bad_statements() -> None:
    bad = '''
TAIL = """, counted AS (SELECT count(*) AS n FROM queued) SELECT n FROM counted"""
ENQUEUE = """WITH queued AS (INSERT INTO t (user_id) SELECT $1 RETURNING id)""" + TAIL
FORMATTED = "SELECT id FROM t WHERE user_id = $1 LIMIT {limit}".format(limit=3)
INTERPOLATED = f"SELECT {COLUMNS} FROM t WHERE user_id = $1 {AFTER}"
BY_ID = """
-- the id first: wrong
SELECT id FROM t WHERE id = $1 AND t.user_id = $2::uuid
"""
REVERSED = "DELETE FROM t WHERE id = $1 AND $2::uuid = user_id"
GOOD = f"SELECT {COLUMNS} FROM t WHERE user_id = $1::uuid AND id = $2"
ACROSS = "UPDATE t SET n = 1 FROM unnest($1::uuid[]) AS x(user_id) WHERE t.user_id = x.user_id"
NOT_SQL = "user_id = $2" + "!"
'''
    assert statement_problems(bad) == {
        "ENQUEUE": ["assembled (BinOp): write it out whole"],
        "FORMATTED": ["assembled (Call): write it out whole"],
        "INTERPOLATED": ["interpolates AFTER"],
        "BY_ID": ["user_id = $2"],
        "REVERSED": ["user_id = $2"],
    }


def test_statements_are_whole_and_take_the_user_first() -> None:
    """Every SQL statement a store defines is written out whole where it is defined (a literal,
    or an f-string of column lists only), and ``$1`` is the user wherever one filters by it."""
    found = {f"{module_name(p)}.{name}": problems for p in store_modules()
             for name, problems in statement_problems(p.read_text()).items()}
    assert {k: v for k, v in found.items() if k not in STATEMENT_EXCEPTIONS} == {}
    assert sorted(STATEMENT_EXCEPTIONS.keys() - found.keys()) == []


def built_statements(source: str) -> list[int]:
    """Lines where a ``fetch``/``execute`` call is handed anything but a name, an attribute or a
    literal as its statement (a string built on the spot)."""
    calls = {"fetch", "fetchrow", "fetchval", "execute", "executemany"}
    return [node.lineno for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in calls and node.args
            and not isinstance(node.args[0], ast.Name | ast.Attribute | ast.Constant)]


def test_the_call_check_finds_built_statements() -> None:
    bad = '''
async def f(conn, where):
    await conn.fetch(READ, 1)
    await conn.execute(store.READ, 1)
    await conn.fetchrow("SELECT 1")
    await conn.fetch(READ + where, 1)
    await conn.fetchval(f"SELECT {where}")
'''
    assert built_statements(bad) == [6, 7]


def test_stores_run_only_named_statements() -> None:
    """What a store function hands to ``fetch``/``execute`` is a named constant (checked
    above) or a literal, never a string built on the spot."""
    built = {module_name(p): lines for p in store_modules()
             if (lines := built_statements(p.read_text()))}
    assert built == {}


# Tables whose key begins with user_id (0006_user_keys): a join to one of them names the user,
# or the lookup has no index to use (the key's first column unknown) and reads the whole table
# — as CARD_WITH_CONTEXT's join of threads by id alone did, a sequential scan per card answer.
USER_KEYED = {"threads", "messages", "message_components", "decisions", "turns", "presence",
              "api_tokens", "push_devices", "push_outbox", "push_action_tokens",
              "message_secrets", "component_audit"}
_JOIN = re.compile(r"\bJOIN\s+(\w+)\s+(?:AS\s+)?(\w+)\s+ON\s+(.*?)"
                   r"(?=\bJOIN\b|\bWHERE\b|\bGROUP\b|\bORDER\b|\bLIMIT\b|\)|\Z)", re.S)


def join_problems(source: str) -> dict[str, list[str]]:
    """``{constant: [joins]}``: the joins to a user-keyed table whose ``ON`` names no user_id."""
    found: dict[str, list[str]] = {}
    for node in ast.parse(source).body:
        if not isinstance(node, ast.Assign | ast.AnnAssign) or node.value is None:
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        names = [t.id for t in targets if isinstance(t, ast.Name) and t.id.isupper()]
        bad = [f"JOIN {table} {alias} ON {' '.join(on.split())}"
               for text in _strings_in(node.value) if _STATEMENT.match(text)
               for table, alias, on in _JOIN.findall(text)
               if table in USER_KEYED and f"{alias}.user_id" not in on]
        if names and bad:
            found.update({n: bad for n in names})
    return found


def test_the_join_check_finds_joins_without_the_user() -> None:
    bad = '''
BY_ID = """SELECT 1 FROM message_components c JOIN threads t ON t.id = c.thread_id
            WHERE c.user_id = $1"""
KEYED = """SELECT 1 FROM message_components c
             JOIN messages AS m ON m.user_id = c.user_id AND m.id = c.message_id
            WHERE c.user_id = $1"""
USERS = "SELECT 1 FROM api_tokens t JOIN users u ON u.id = t.user_id WHERE t.user_id = $1"
'''
    assert join_problems(bad) == {"BY_ID": ["JOIN threads t ON t.id = c.thread_id"]}


def test_joins_to_user_keyed_tables_name_the_user() -> None:
    found = {f"{module_name(p)}.{name}": joins for p in store_modules()
             for name, joins in join_problems(p.read_text()).items()}
    assert found == {}
