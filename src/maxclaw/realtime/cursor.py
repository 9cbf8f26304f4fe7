"""Positions in the change stream and the opaque cursor clients hold.

A position is ``(xid, rev)``: the writing transaction's id (``xid8``, from the rev trigger) and
the row's rev. Changes are read in ``(xid, rev)`` order and only from transactions older than
the reader's snapshot ``xmin`` (all of them have finished), so a transaction that took its rev
early but committed late is still read after every position a client was ever given.
``Position(h, 0)`` means "everything written by transactions below ``h`` has been read".
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass

CURSOR_VERSION = "1"
_CANONICAL = re.compile(r"^1\.(0|[1-9][0-9]{0,19})\.(0|[1-9][0-9]{0,19})$")
_MAX = 2**63 - 1  # xid8 and bigint both fit; anything larger is not ours


class CursorError(ValueError):
    """The cursor cannot be decoded (the client should subscribe again with a null cursor)."""


@dataclass(frozen=True, order=True, slots=True)
class Position:
    """A point in the change stream, ordered like the catch-up query orders rows."""

    xid: int
    rev: int


ORIGIN = Position(0, 0)


def transaction_end(xid: int) -> Position:
    """The position past every row transaction ``xid`` wrote: what a rev hint names since
    0029 (one hint per user and transaction, ``{"u", "x"}``). ``Position(h, 0)`` with ``h >
    xid`` covers it, so a read whose horizon passed the transaction settles the hint."""
    return Position(xid, _MAX)


def encode(position: Position) -> str:
    """The opaque cursor string for ``position`` (base64url, no padding)."""
    raw = f"{CURSOR_VERSION}.{position.xid}.{position.rev}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode(cursor: str) -> Position:
    """The position a cursor names; ``CursorError`` unless it is exactly one we could have made."""
    if not isinstance(cursor, str) or not 1 <= len(cursor) <= 64:
        raise CursorError("not a cursor")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise CursorError("not a cursor") from None
    match = _CANONICAL.match(raw)
    if match is None:
        raise CursorError("not a cursor")
    xid, rev = int(match.group(1)), int(match.group(2))
    if xid > _MAX or rev > _MAX:
        raise CursorError("not a cursor")
    position = Position(xid, rev)
    if encode(position) != cursor:  # one spelling per position, so cursors compare as strings too
        raise CursorError("not a cursor")
    return position
