"""The local stand-in for a database distributed by user: every user-owned table hash-partitioned
by ``user_id`` (``maxclaw db partition --partitions 8``; docs/scaling.md).

Run on a freshly migrated, empty database (the test harness does it to its template when
``MAXCLAW_TEST_PARTITIONS`` is set). Each table in ``PARTITIONED`` is rebuilt as ``PARTITION BY
HASH (user_id)`` with ``n`` partitions (``<table>_p0`` …) and keeps, by name and definition,
everything the migrations gave it: columns, defaults and identity, CHECK / primary / unique
keys, indexes, triggers (PostgreSQL clones row triggers onto each partition) and foreign keys
in both directions. So the code runs unchanged on it, and ``maxclaw migrate --check`` still
says current. What it cannot keep is refused: a unique key without ``user_id`` (migration
``0006_user_keys`` removed the last of them).

``users`` and the four routing tables, whose rows are found by a token's hash before the user
is known (``api_tokens``, ``ws_tickets``, ``push_action_tokens``, ``signin_codes``), stay as
they are: on Citus they would be a reference table and lookup tables in front of the user's
shard.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import psycopg

from maxclaw.db.urls import plain_url

PARTITIONED = ("threads", "messages", "decisions", "message_components", "component_audit",
               "turns", "presence", "push_devices", "push_outbox", "message_secrets")
NOT_PARTITIONED = ("users", "api_tokens", "ws_tickets", "push_action_tokens", "signin_codes")


class PartitionError(Exception):
    """The database cannot be partitioned as it is; the message says why and what to do."""


@dataclass
class _TableDDL:
    """What a table had, as DDL to replay on its partitioned replacement."""

    name: str
    constraints: list[str] = field(default_factory=list)  # CHECK, PRIMARY KEY, UNIQUE
    indexes: list[str] = field(default_factory=list)  # those not backing a constraint
    triggers: list[str] = field(default_factory=list)
    identity_sequences: dict[str, str] = field(default_factory=dict)  # column -> sequence


def _read_table(conn: psycopg.Connection, table: str) -> _TableDDL:
    ddl = _TableDDL(table)
    for name, definition in conn.execute(
            """SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint
                WHERE conrelid = %s::regclass AND contype IN ('c', 'p', 'u') AND conislocal
                ORDER BY contype = 'c' DESC, conname""", (table,)).fetchall():
        ddl.constraints.append(f'ALTER TABLE {table} ADD CONSTRAINT "{name}" {definition}')
    ddl.indexes = [row[0] for row in conn.execute(
        """SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i
            WHERE i.indrelid = %s::regclass
              AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)
            ORDER BY i.indexrelid""", (table,)).fetchall()]
    ddl.triggers = [row[0] for row in conn.execute(
        """SELECT pg_get_triggerdef(oid) FROM pg_trigger
            WHERE tgrelid = %s::regclass AND NOT tgisinternal ORDER BY tgname""",
        (table,)).fetchall()]
    for column, sequence in conn.execute(
            """SELECT a.attname, pg_get_serial_sequence(%s, a.attname) FROM pg_attribute a
                WHERE a.attrelid = %s::regclass AND a.attidentity <> ''""",
            (table, table)).fetchall():
        ddl.identity_sequences[column] = sequence
    return ddl


def _foreign_keys(conn: psycopg.Connection, tables: tuple[str, ...]) -> list[tuple[str, str, str]]:
    """Every foreign key from or to one of ``tables``: (table, name, definition)."""
    rows = conn.execute(
        """SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid)
             FROM pg_constraint
            WHERE contype = 'f' AND conislocal
              AND (conrelid::regclass::text = ANY(%s) OR confrelid::regclass::text = ANY(%s))
            ORDER BY 1, 2""", (list(tables), list(tables))).fetchall()
    return [(str(t), str(n), str(d)) for t, n, d in rows]


def _check_ready(conn: psycopg.Connection, tables: tuple[str, ...]) -> None:
    for table in tables:
        kind = conn.execute("SELECT relkind FROM pg_class WHERE oid = %s::regclass",
                            (table,)).fetchone()
        if kind is not None and kind[0] == "p":
            raise PartitionError(f"{table} is already partitioned: this database has been "
                                 "partitioned before")
        if conn.execute(f"SELECT EXISTS (SELECT 1 FROM {table})").fetchone() == (True,):
            raise PartitionError(
                f"{table} holds rows: partition a freshly migrated, empty database (this is "
                "the test stand-in, not a data migration)")
    keyless = conn.execute(
        """SELECT conrelid::regclass::text, conname FROM pg_constraint c
            WHERE contype IN ('p', 'u') AND conrelid::regclass::text = ANY(%s)
              AND NOT EXISTS (SELECT 1 FROM pg_attribute a
                               WHERE a.attrelid = c.conrelid AND a.attnum = ANY(c.conkey)
                                 AND a.attname = 'user_id')""", (list(tables),)).fetchall()
    keyless += conn.execute(
        """SELECT indrelid::regclass::text, indexrelid::regclass::text FROM pg_index i
            WHERE indisunique AND indrelid::regclass::text = ANY(%s)
              AND NOT EXISTS (SELECT 1 FROM pg_attribute a
                               WHERE a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
                                 AND a.attname = 'user_id')""", (list(tables),)).fetchall()
    if keyless:
        named = ", ".join(f"{t}.{n}" for t, n in sorted(set(keyless)))
        raise PartitionError(f"unique keys without user_id cannot be partitioned by user: "
                             f"{named}; run `maxclaw migrate` (0006_user_keys) first")


def _name_partition_indexes(conn: psycopg.Connection, table: str) -> None:
    """Each partition's copy of an index (and of the key it backs) is called
    ``<index>_p<n>``: a violation names the partition's copy, and the code recognises its key
    by that name (``maxclaw.db.constraints.violated``)."""
    for child, parent, part in conn.execute(
            """SELECT ci.relname, pi.relname, t.relname FROM pg_inherits i
                 JOIN pg_class ci ON ci.oid = i.inhrelid
                 JOIN pg_class pi ON pi.oid = i.inhparent
                 JOIN pg_index x ON x.indexrelid = i.inhrelid
                 JOIN pg_class t ON t.oid = x.indrelid
                WHERE ci.relkind = 'i' AND pi.oid IN (
                      SELECT indexrelid FROM pg_index WHERE indrelid = %s::regclass)""",
            (table,)).fetchall():
        conn.execute(f'ALTER INDEX "{child}" RENAME TO "{parent}_{part.rsplit("_", 1)[1]}"')


def partition(conn: psycopg.Connection, partitions: int,
              tables: tuple[str, ...] = PARTITIONED) -> None:
    """Rebuild ``tables`` as hash partitions by ``user_id``, in the caller's transaction."""
    if partitions < 2:
        raise PartitionError("--partitions must be at least 2")
    _check_ready(conn, tables)
    saved = {table: _read_table(conn, table) for table in tables}
    foreign_keys = _foreign_keys(conn, tables)
    for table, name, _ in foreign_keys:
        conn.execute(f'ALTER TABLE {table} DROP CONSTRAINT "{name}"')
    for table in tables:
        old = f"{table}__unpartitioned"
        conn.execute(f"ALTER TABLE {table} RENAME TO {old}")
        conn.execute(f"CREATE TABLE {table} (LIKE {old} INCLUDING DEFAULTS INCLUDING IDENTITY"
                     f" INCLUDING GENERATED INCLUDING STORAGE) PARTITION BY HASH (user_id)")
        for i in range(partitions):
            conn.execute(f"CREATE TABLE {table}_p{i} PARTITION OF {table}"
                         f" FOR VALUES WITH (MODULUS {partitions}, REMAINDER {i})")
        conn.execute(f"DROP TABLE {old}")  # its indexes, triggers and sequence go with it
        ddl = saved[table]
        for column, sequence in ddl.identity_sequences.items():
            # the replacement's identity sequence got a new name; give it the old one back
            fresh = conn.execute("SELECT pg_get_serial_sequence(%s, %s)",
                                 (table, column)).fetchone()
            if fresh is not None and fresh[0] != sequence:
                conn.execute(f"ALTER SEQUENCE {fresh[0]} RENAME TO "
                             f"{sequence.rsplit('.', 1)[-1]}")
        for statement in ddl.constraints + ddl.indexes + ddl.triggers:
            conn.execute(statement)
        _name_partition_indexes(conn, table)
    for table, name, definition in foreign_keys:
        conn.execute(f'ALTER TABLE {table} ADD CONSTRAINT "{name}" {definition}')


def partition_database(database_url: str, partitions: int) -> None:
    """``maxclaw db partition``: one transaction, so a failure leaves the schema as it was."""
    with psycopg.connect(plain_url(database_url)) as conn:
        partition(conn, partitions)


def partition_counts(database_url: str) -> dict[str, int]:
    """Each partitioned table with its number of partitions (tests and the CLI's report)."""
    with psycopg.connect(plain_url(database_url), autocommit=True) as conn:
        rows = conn.execute(
            """SELECT c.relname, count(i.inhrelid) FROM pg_class c
                 LEFT JOIN pg_inherits i ON i.inhparent = c.oid
                WHERE c.relkind = 'p' AND c.relnamespace = 'public'::regnamespace
                GROUP BY c.relname ORDER BY 1""").fetchall()
    return {str(name): int(count) for name, count in rows}
