"""``maxclaw migrate --check`` and the expand-only check of docs/operations.md.

``status(url)`` compares the revision the database records with the newest one this code
ships: current, behind (``maxclaw migrate`` would apply something) or ahead (a newer release
migrated it; this code does not know the revision).

``expand_violations(before, after)`` compares two catalog snapshots (the schema one release
reads, and the schema after the next release's migrations) and names every change that would
break a replica still running the previous release: a table or column gone or retyped, a
column that became NOT NULL, a new NOT NULL column without a default, a new CHECK / UNIQUE /
foreign key / primary key (old code may write rows it refuses), a UNIQUE or primary key gone
(old code's ``ON CONFLICT`` may name it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

import psycopg
from alembic.script import ScriptDirectory

from maxclaw.db.migrate import alembic_config
from maxclaw.db.urls import plain_url

State = Literal["current", "behind", "ahead"]

# exit codes of `maxclaw migrate --check` (1 stays "could not tell": an error)
EXIT_CODES: dict[State, int] = {"current": 0, "behind": 2, "ahead": 3}


@dataclass(frozen=True)
class SchemaStatus:
    state: State
    database: str | None  # None: no migration ever ran
    code: str

    def message(self) -> str:
        db = self.database or "an empty schema"
        if self.state == "current":
            return f"the database is at {self.code}, as this code expects"
        if self.state == "behind":
            return (f"the database is at {db}, this code expects {self.code}: "
                    "run `maxclaw migrate`")
        return (f"the database is at {db}, which this code does not know (its newest is "
                f"{self.code}): a newer release migrated it; run that release")


def database_revision(database_url: str) -> str | None:
    with psycopg.connect(plain_url(database_url), autocommit=True) as conn:
        exists = conn.execute("SELECT to_regclass('public.alembic_version')").fetchone()
        if exists is None or exists[0] is None:
            return None
        row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
        return None if row is None else str(row[0])


def status(database_url: str) -> SchemaStatus:
    script = ScriptDirectory.from_config(alembic_config(database_url))
    head = script.get_current_head()
    assert head is not None
    current = database_revision(database_url)
    if current == head:
        return SchemaStatus("current", current, head)
    known = {rev.revision for rev in script.walk_revisions()}
    if current is None or current in known:
        return SchemaStatus("behind", current, head)
    return SchemaStatus("ahead", current, head)


# -- the expand-only check --------------------------------------------------------------------

SNAPSHOT_QUERIES = {
    "columns": """
        SELECT table_name, column_name, udt_name, is_nullable, column_default IS NOT NULL
               OR is_identity = 'YES'
          FROM information_schema.columns
         WHERE table_schema = 'public' AND table_name <> 'alembic_version'""",
    "constraints": """
        SELECT conrelid::regclass::text, contype::text, pg_get_constraintdef(oid), conname
          FROM pg_constraint
         WHERE connamespace = 'public'::regnamespace
           AND conrelid::regclass::text <> 'alembic_version'""",
    "unique_indexes": """
        SELECT tablename, indexdef FROM pg_indexes
         WHERE schemaname = 'public' AND tablename <> 'alembic_version'
           AND indexdef LIKE 'CREATE UNIQUE INDEX%'""",
}

Snapshot = dict[str, set[tuple[Any, ...]]]


def snapshot(database_url: str) -> Snapshot:
    with psycopg.connect(plain_url(database_url), autocommit=True) as conn:
        return {name: {tuple(r) for r in conn.execute(sql).fetchall()}
                for name, sql in SNAPSHOT_QUERIES.items()}


def _normalise(indexdef: str) -> str:
    # the index's name is not what old code depends on; its columns and predicate are
    on = indexdef.split(" ON ", 1)
    return on[1] if len(on) == 2 else indexdef


_LITERAL = re.compile(r"'[^']*'::\w+")


def _widened(old: str | None, new: str) -> bool:
    """Whether ``new`` is ``old`` with more literals in its value lists (``x IN (…)``)."""
    if old is None:
        return False
    shape = _LITERAL.sub("?", old)
    same_shape = re.sub(r"\?(, \?)*", "?", shape) == re.sub(
        r"\?(, \?)*", "?", _LITERAL.sub("?", new))
    return same_shape and set(_LITERAL.findall(old)) <= set(_LITERAL.findall(new))


def expand_violations(before: Snapshot, after: Snapshot) -> list[str]:
    """What in ``after`` would break code written for ``before`` (empty: expand-only)."""
    problems: list[str] = []
    old_cols = {(t, c): (typ, nullable, has_default)
                for t, c, typ, nullable, has_default in before["columns"]}
    new_cols = {(t, c): (typ, nullable, has_default)
                for t, c, typ, nullable, has_default in after["columns"]}
    old_tables = {t for t, _ in old_cols}
    for (table, col), (typ, nullable, _) in sorted(old_cols.items()):
        if (table, col) not in new_cols:
            problems.append(f"{table}.{col} was dropped (contract it in a later release)")
            continue
        new_typ, new_nullable, _ = new_cols[(table, col)]
        if new_typ != typ:
            problems.append(f"{table}.{col} changed type {typ} -> {new_typ}")
        if nullable == "YES" and new_nullable == "NO":
            problems.append(f"{table}.{col} became NOT NULL")
    for (table, col), (_, nullable, has_default) in sorted(new_cols.items()):
        if (table, col) in old_cols or table not in old_tables:
            continue
        if nullable == "NO" and not has_default:
            problems.append(f"{table}.{col} is new, NOT NULL and has no default "
                            "(the previous release's INSERTs would fail)")
    old_cons = {(t, kind, d) for t, kind, d, _ in before["constraints"]}
    old_checks = {(t, name): d for t, kind, d, name in before["constraints"] if kind == "c"}
    for table, kind, definition, name in sorted(after["constraints"]):
        if (table, kind, definition) in old_cons:
            continue
        if table not in old_tables or kind not in ("c", "u", "f", "p", "x"):
            continue
        if kind == "c" and _widened(old_checks.get((table, name)), definition):
            continue  # the same CHECK admitting more values: looser for old writers
        label = {"c": "CHECK", "u": "UNIQUE", "f": "FOREIGN KEY", "p": "PRIMARY KEY",
                 "x": "EXCLUDE"}[kind]
        problems.append(f"{table} gained a {label} constraint: {definition}")
    new_cons = {(t, kind, d) for t, kind, d, _ in after["constraints"]}
    for table, kind, definition in sorted(old_cons - new_cons):
        if kind in ("u", "p") and table in {t for t, _ in new_cols}:
            label = "UNIQUE" if kind == "u" else "PRIMARY KEY"
            problems.append(f"{table} lost a {label} constraint: {definition} (the previous "
                            "release's ON CONFLICT may name it)")
    old_unique = {(t, _normalise(d)) for t, d in before["unique_indexes"]}
    for table, definition in sorted(after["unique_indexes"]):
        if table in old_tables and (table, _normalise(definition)) not in old_unique:
            problems.append(f"{table} gained a unique index: {_normalise(definition)}")
    return problems
