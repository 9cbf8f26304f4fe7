"""``tests.plans.explain`` shows the plan each mode names: with ``force_generic_plan`` the
prepared statement's generic plan (its parameters stay parameters), with
``force_custom_plan`` one planned with the values. A plain ``EXPLAIN`` with bound values, which
the plan tests used before, showed the custom plan under both modes."""

from __future__ import annotations

import json
from typing import Any

from maxclaw.db.database import connect
from tests import plans

SQL = "SELECT id FROM threads WHERE user_id = $1::uuid AND id = ANY($2::uuid[])"
ARGS = ("00000000-0000-0000-0000-000000000001", ["00000000-0000-0000-0000-000000000002"])


def _conditions(rows: list[Any]) -> str:
    return json.dumps(plans.root(rows))


async def test_the_generic_plan_keeps_its_parameters(database_url: str) -> None:
    conn = await connect(database_url)
    try:
        generic = _conditions(await plans.explain(conn, SQL, ARGS, "force_generic_plan"))
        custom = _conditions(await plans.explain(conn, SQL, ARGS, "force_custom_plan"))
        plain = await conn.fetch("EXPLAIN (FORMAT JSON) " + SQL, *ARGS)
        # the statement is gone after, whatever the mode
        assert await conn.fetchval("SELECT count(*) FROM pg_prepared_statements"
                                   " WHERE name LIKE 'plan_%'") == 0
    finally:
        await conn.close()
    assert "$1" in generic and ARGS[0] not in generic, generic
    assert ARGS[0] in custom and "$1" not in custom, custom
    # why the helper exists: the plain EXPLAIN is planned with the values, set mode or not
    assert ARGS[0] in _conditions(plain)


async def test_values_of_every_kind_the_service_binds_are_spelled(database_url: str) -> None:
    """Arrays, JSON text, timestamps, NULLs and booleans go through as literals."""
    sql = ("SELECT $1::text[] AS a, $2::jsonb AS j, $3::timestamptz AS t, $4::bigint AS n,"
           " $5::bool AS b, $6::text AS q")
    from datetime import UTC, datetime
    args = (["it's", "{x}"], '{"k": "v\'s"}', datetime(2026, 12, 6, tzinfo=UTC), None, True,
            "O'Brien")
    conn = await connect(database_url)
    try:
        rows = await plans.explain(conn, sql, args, "force_generic_plan", "FORMAT JSON, VERBOSE")
    finally:
        await conn.close()
    assert rows and "Result" in _conditions(rows)
