"""Which constraint a violation names, on a plain or a partitioned schema."""

from __future__ import annotations

import re

import asyncpg


def violated(exc: asyncpg.PostgresError, constraint: str) -> bool:
    """Whether ``exc`` is about ``constraint``. On a table partitioned by user
    (``maxclaw db partition``) PostgreSQL names the partition's copy of the key, which the
    partition step calls ``<constraint>_p<n>``."""
    name = str(getattr(exc, "constraint_name", None) or "")
    return name == constraint or re.fullmatch(re.escape(constraint) + r"_p\d+", name) is not None
