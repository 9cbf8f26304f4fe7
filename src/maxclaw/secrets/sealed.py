"""A sealed box on its way into ``message_secrets`` (a plain value: stores may take it)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class Sealed:
    """A box ready to insert next to its message."""

    kind: str  # answer | echo
    component_id: str | None
    key_id: str
    box: bytes
    expires_at: datetime
