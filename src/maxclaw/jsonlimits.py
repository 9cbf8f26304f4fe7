"""Nesting limits for JSON a client can make us store.

Python's JSON decoder recurses, so a value nested a few hundred levels deep can be stored in a
jsonb column and then fail every later read of it (the decoder or the response encoder gives
up). Refusing it at the door keeps reads healthy: nothing legitimate nests this deep.
"""

from __future__ import annotations

import json
from typing import Any

from maxclaw.errors import Invalid

MAX_DEPTH = 64
# Strings (keys included) in one request body. Every string costs the same work however short
# it is (decode, the secret echo check, encode for the insert): 1 MiB of empty strings was
# 330,000 of them and 13 s of masking. Real rows hold far fewer; a large result is one string.
MAX_BODY_STRINGS = 50_000
# An agent's ``source_meta`` on an event row: a pointer to what happened (a job's id, a link),
# not a payload; every page that returns the row carries it, so it is small by rule.
MAX_SOURCE_META_BYTES = 16 * 1024


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


def check_json_bytes(value: Any, loc: list[str | int], max_bytes: int) -> None:
    """``Invalid`` at ``loc`` when ``value`` written as JSON is over ``max_bytes`` bytes."""
    size = len(json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise Invalid.at(loc, f"{loc[-1]} is at most {max_bytes // 1024} KiB as JSON "
                              f"({size:,} bytes given); store larger data elsewhere and "
                              "point to it")


_BRACKETS = bytes.maketrans(b"{}", b"[]")
_NOT_STRUCTURE = bytes(c for c in range(256) if c not in b'"[]{}')


def nested_deeper(raw: bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether the JSON text ``raw`` nests deeper than ``limit``, read from the bytes before
    any parser recurses into them: a few passes in C over at most the body's size, where a
    walk of the decoded value cost 225 ms per MiB on the event loop. Malformed JSON is the
    parser's to refuse (this says False unless it finds more than ``limit`` levels)."""
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False  # the common body: not enough brackets to nest that deep
    # escapes first, so every quote left is a string's delimiter; then only quotes and
    # brackets; then two quotes side by side go (an empty string, or one string closing where
    # the next opens): every quote after them keeps its parity, so the even pieces between
    # quotes are what lies outside strings
    bare = raw.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _NOT_STRUCTURE)
    outside = b"".join(bare.replace(b'""', b"").split(b'"')[0::2]).translate(_BRACKETS)
    if b"[" * (limit + 1) in outside:
        return True
    for _ in range(limit):  # each pass removes the innermost level
        shorter = outside.replace(b"[]", b"")
        if len(shorter) == len(outside):
            return False
        outside = shorter
    return b"[]" in outside


def count_strings(raw: bytes) -> int:
    """How many strings (keys included) the JSON text ``raw`` holds, from its bytes: its
    unescaped quotes, halved (escaped backslashes first, so every ``\\"`` left is a quote
    inside a string)."""
    bare = raw.replace(b"\\\\", b"")
    return (bare.count(b'"') - bare.count(b'\\"')) // 2
