"""The package map, enforced: every module has a declared layer (``tests/unit/layers.py``),
imports go only downward and never across the client/server line, no two packages depend on
each other (through an import or through a Protocol another package's service satisfies), and
every document the code and the docs cite is in the repository.

    client  ──▶ wire ◀── server packages          (the wire models are the only shared part)
    launchers (cli, devserver, app, composition) ──▶ anything
    api ──▶ surface ──▶ service ──▶ store ──▶ model ──▶ foundation     (never upward)

Each rule (``tests/unit/package_map.py``) is a function of source text, run here once on a
made-up bad example (so a rule that finds nothing cannot pass unnoticed) and once on the tree.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.unit.layers import LAYERS
from tests.unit.package_map import (
    ROOT,
    Graph,
    cycles,
    declaration_problems,
    import_graph,
    import_problems,
    missing_citations,
    module_name,
    package_graph,
    protocol_edges,
    read_sources,
    repository_texts,
    under,
)

# Imports against the layers that are allowed, each with its reason.
ALLOWED_UPWARD = {
    ("maxclaw.api.deps", "maxclaw.composition"): "routes are typed with the composition "
    "root's type",
}

_GRAPH: Graph = {}


def all_modules() -> Graph:
    """The real tree's import graph (read once per run)."""
    if not _GRAPH:
        _GRAPH.update(import_graph(read_sources()))
    return _GRAPH


def test_the_map_reads_real_modules() -> None:
    modules = all_modules()
    # guards the test itself: a parser that found nothing would pass everything below
    assert len(modules) > 100
    assert "maxclaw.components.service" in modules
    assert "maxclaw.components.store" in modules["maxclaw.components.moves"]
    assert "maxclaw.wire.models" in modules["maxclaw.client.http"]


# ----- every module declared -----


def test_the_declaration_check_finds_undeclared_modules() -> None:
    layers = {"maxclaw.a": "store", "maxclaw.gone": "service", "maxclaw.b": "middle"}
    assert declaration_problems({"maxclaw.a", "maxclaw.b", "maxclaw.new"}, layers) == [
        "maxclaw.new: no declared layer (add it to tests/unit/layers.py)",
        "maxclaw.gone: declared but not in src",
        "maxclaw.b: unknown layer 'middle'",
    ]


def test_every_module_has_a_declared_layer() -> None:
    assert declaration_problems(set(all_modules()), LAYERS) == []


# ----- imports go down, and never across the client/server line -----


def test_the_import_check_finds_upward_and_cross_imports() -> None:
    layers = {"m.api": "api", "m.svc": "service", "m.store": "store", "m.cli": "launcher",
              "m.client": "client", "m.wire": "wire", "m.rows": "model"}
    graph = {"m.store": {"m.svc", "m.rows"}, "m.svc": {"m.store", "m.wire", "m.cli"},
             "m.api": {"m.svc", "m.client"}, "m.client": {"m.wire", "m.rows"},
             "m.wire": {"m.rows"}, "m.cli": {"m.api", "m.client"}, "m.rows": set()}
    assert import_problems(graph, layers) == {
        "m.store": ["m.svc (service)"], "m.svc": ["m.cli (launcher)"],
        "m.api": ["m.client (client)"], "m.client": ["m.rows (model)"],
        "m.wire": ["m.rows (model)"]}


def test_no_module_imports_against_the_map() -> None:
    """Stores never import services or the api; services never import the api; the client and
    the server share only ``wire``; only the launchers import the composition root."""
    assert import_problems(all_modules(), LAYERS, ALLOWED_UPWARD) == {}


def test_card_definitions_are_a_leaf() -> None:
    """``maxclaw.cards`` depends only on the foundations, so every service may use it."""
    foundations = ("maxclaw.cards", "maxclaw.errors", "maxclaw.jsonlimits")
    wrong = {m: sorted(i for i in imps if not under(i, foundations))
             for m, imps in all_modules().items() if under(m, ("maxclaw.cards",))}
    assert {m: i for m, i in wrong.items() if i} == {}


# ----- no package cycles, also through a Protocol -----


def test_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# a cycle that no import shows: a service typed with a Protocol another package's service meets
_HIDDEN = {
    "maxclaw.cards": "",
    "maxclaw.cards.service": '''
from maxclaw.queue.service import QueueService

class CardService:
    def __init__(self, queue: QueueService) -> None: ...
    async def answer(self, card_id: str) -> None: ...
''',
    "maxclaw.queue": "",
    "maxclaw.queue.service": '''
from typing import Protocol
from maxclaw.clock import Clock

class Answerer(Protocol):
    async def answer(self, card_id: str) -> None: ...

class QueueService:
    def __init__(self, cards: "Answerer", clock: Clock) -> None: ...
''',
    # a Protocol met by something that is no service (an injected clock) adds no edge
    "maxclaw.clock": '''
from typing import Protocol

class Clock(Protocol):
    def now(self) -> float: ...

class SystemClock:
    def now(self) -> float: ...
''',
}
_HIDDEN_LAYERS = {"maxclaw.cards": "model", "maxclaw.cards.service": "service",
                  "maxclaw.queue": "model", "maxclaw.queue.service": "service",
                  "maxclaw.clock": "foundation"}


def test_the_cycle_check_sees_through_a_protocol() -> None:
    graph = import_graph(_HIDDEN)
    assert graph["maxclaw.cards.service"] == {"maxclaw.queue.service"}
    assert graph["maxclaw.queue.service"] == {"maxclaw.clock"}  # no import back to cards
    assert protocol_edges(_HIDDEN, graph, _HIDDEN_LAYERS) == {
        ("maxclaw.queue", "maxclaw.cards", "maxclaw.queue.service.Answerer")}
    assert cycles(package_graph(_HIDDEN, graph, _HIDDEN_LAYERS)) == [
        ["maxclaw.cards", "maxclaw.queue"]]


def test_no_package_cycles() -> None:
    """No two packages depend on each other, by import or through a Protocol."""
    sources = read_sources()
    found = cycles(package_graph(sources, all_modules(), LAYERS))
    through_protocols = sorted(protocol_edges(sources, all_modules(), LAYERS))
    assert found == [], through_protocols


# ----- typed rows at the store boundary -----

# Store functions annotated with ``Any`` or ``asyncpg.Record`` (in what they return or take),
# each with the reason it is left: none today. Every public store function returns typed rows
# (``maxclaw.db.rows``) or plain values, so mypy sees the columns the services read; a new
# exception needs a stated reason here.
UNTYPED_STORE_FUNCTIONS: dict[str, str] = {}
_UNTYPED = re.compile(r"\bAny\b|\bRecord\b")


def store_modules() -> list[Path]:
    return [p for p in sorted(ROOT.rglob("*.py")) if LAYERS.get(module_name(p)) == "store"]


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
    "maxclaw.realtime.store.READ_THREADS":
        "interpolates the shared cursor predicate _AFTER; realtime's to change",
    "maxclaw.realtime.store.READ_MESSAGES": "as READ_THREADS",
    "maxclaw.realtime.store.READ_MESSAGES_CUT": "as READ_THREADS",
    "maxclaw.realtime.store.READ_DECISIONS": "as READ_THREADS",
    "maxclaw.search.store.SEARCH":
        "interpolates search_sql.SEARCH_TEXT and SEARCHABLE_MESSAGE: the search must spell the "
        "indexed expression exactly as the GIN indexes do, so it is written once",
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


# ----- every cited document is in the repository -----

# ``*.md`` strings that name no document, each with its reason
NOT_CITATIONS = {
    "tests/integration/test_agent_openai.py: notes/plan.md":
        "a file the scripted agent writes in its workspace",
}


def test_the_citation_check_finds_missing_documents() -> None:
    exists = {"README.md", "docs/api.md", "docs/operations.md", "src/pkg/notes.md"}
    texts = {
        "src/pkg/mod.py": "# the contract: api.md, domain.md and docs/operations.md#retention"
                          "\n# see notes.md; ../../README.md; https://example.org/x/CHANGES.md",
        "docs/operations.md": "[the contract](api.md#errors), [style](../shared/spec/style.md)",
        "tests/test_x.py": '"""docs/nowhere.md, /work/shared/spec/api.md"""',
    }
    assert missing_citations(texts, exists) == [
        "docs/operations.md: ../shared/spec/style.md",
        "src/pkg/mod.py: domain.md",
        "tests/test_x.py: /work/shared/spec/api.md",
        "tests/test_x.py: docs/nowhere.md",
    ]


def test_every_cited_document_is_in_the_repository() -> None:
    """A reference in the code, the tests or the docs to a ``*.md`` file (``api.md``,
    ``docs/operations.md#retention``; a bare name is looked for in docs/ too) names a file of
    this repository: a reader with a clone can open what the code says it implements."""
    # this file names documents as data (the made-up ones of the example, the known misses)
    texts, exists = repository_texts(leave_out=Path(__file__).resolve())
    assert len(texts) > 200 and "docs/api.md" in exists  # guards the walk itself
    missing = [m for m in missing_citations(texts, exists) if m not in NOT_CITATIONS]
    assert missing == []
    assert sorted(NOT_CITATIONS.keys() - set(missing_citations(texts, exists))) == []
