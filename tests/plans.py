"""EXPLAIN a statement as the service runs it: with a custom plan (its values known to the
planner) or with the generic plan a prepared statement settles on after five runs.

``EXPLAIN <sql>`` sent with bound parameters is always planned with their values: the server
hands the bound values to the planner as constants, whatever ``plan_cache_mode`` says (an
EXPLAIN is a utility statement, and no plan of it is cached). So a generic plan is only seen
through a prepared statement: ``PREPARE`` the statement, then ``EXPLAIN EXECUTE`` it with
``plan_cache_mode = force_generic_plan``. ``EXECUTE`` takes no bound parameters, so the values
are spelled as literals of the parameter types the server inferred (as it infers them for the
service's own prepared statements)."""

from __future__ import annotations

import contextlib
import json
import uuid
from typing import Any

import asyncpg

MODES = ("force_custom_plan", "force_generic_plan")


async def explain(conn: asyncpg.Connection, sql: str, args: tuple[Any, ...], mode: str,
                  options: str = "FORMAT JSON") -> list[asyncpg.Record]:
    """The rows of ``EXPLAIN (options)`` of ``sql`` with ``args`` under ``mode`` (a
    ``plan_cache_mode``; "auto" is the server's choice for a first run: custom)."""
    await conn.execute(f"SET LOCAL plan_cache_mode = {mode}" if conn.is_in_transaction()
                       else f"SET plan_cache_mode = {mode}")
    if mode != "force_generic_plan":
        return list(await conn.fetch(f"EXPLAIN ({options}) {sql}", *args))
    name = f"plan_{uuid.uuid4().hex[:12]}"
    await conn.execute(f"PREPARE {name} AS {sql}")
    try:
        types: list[str] = list(await conn.fetchval(
            "SELECT parameter_types::text[] FROM pg_prepared_statements WHERE name = $1",
            name) or [])
        assert len(types) == len(args), f"{len(types)} parameters, {len(args)} values"
        values = [f"{await conn.fetchval(f'SELECT quote_nullable($1::{t})', arg)}::{t}"
                  for t, arg in zip(types, args, strict=True)]
        return list(await conn.fetch(
            f"EXPLAIN ({options}) EXECUTE {name}({', '.join(values)})"))
    finally:
        # an aborted transaction refuses it: the caller rolls back, and the statement goes
        # with its connection
        with contextlib.suppress(asyncpg.InFailedSQLTransactionError):
            await conn.execute(f"DEALLOCATE {name}")


def root(rows: list[asyncpg.Record]) -> dict[str, Any]:
    """The top object (``{"Plan": …}``) of ``EXPLAIN (FORMAT JSON)``'s one row, whether the
    connection decodes json or hands it over as text."""
    plan = rows[0][0]
    plan = json.loads(plan) if isinstance(plan, str) else plan
    found: dict[str, Any] = plan[0] if isinstance(plan, list) else plan
    return found
