"""The base of the typed rows stores return (one frozen dataclass per statement shape).

A store turns each ``asyncpg.Record`` into a row with ``from_record`` at its boundary, so the
services read attributes and mypy sees every column: a renamed or dropped column fails the type
check (and, at run time, ``from_record`` itself), not a ``KeyError`` far from the SQL.
Columns map to fields by name; a statement must select exactly the row's fields.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Self

import asyncpg


class Row:
    """Mixin for ``@dataclass(frozen=True, slots=True)`` rows: ``from_record`` by column name."""

    __slots__ = ()

    @classmethod
    def from_record(cls, record: asyncpg.Record, *, skip: Collection[str] = ()) -> Self:
        """The row of one record (its columns are the dataclass's fields, by name). ``skip``
        names columns a statement selects for its side effect only (a NOTIFY's hint)."""
        build: Any = cls  # the dataclass's generated __init__ takes the columns as keywords
        if skip:
            kept: Self = build(**{k: v for k, v in record.items() if k not in skip})
            return kept
        row: Self = build(**record)
        return row
