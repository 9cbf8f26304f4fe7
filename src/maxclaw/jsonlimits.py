"""Nesting limits for JSON a client can make us store.

Python's JSON decoder recurses, so a value nested a few hundred levels deep can be stored in a
jsonb column and then fail every later read of it (the decoder or the response encoder gives
up). Refusing it at the door keeps reads healthy: nothing legitimate nests this deep.
"""

from __future__ import annotations

from typing import Any

from maxclaw.errors import Invalid

MAX_DEPTH = 64


def json_depth(value: Any, stop_at: int = MAX_DEPTH + 1) -> int:
    """The nesting depth of a decoded JSON value (iterative; stops counting at ``stop_at``)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if deepest >= stop_at:
            return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest


def check_depth(value: Any, loc: list[str | int]) -> None:
    """``Invalid`` at ``loc`` when ``value`` nests deeper than ``MAX_DEPTH``."""
    if json_depth(value) > MAX_DEPTH:
        raise Invalid.at(loc, f"nested deeper than {MAX_DEPTH} levels")
