"""Finding a thread's secrets in what the agent writes, and masking them for clients.

A secret is searched as itself and in the encodings an agent most often passes it on in:
JSON-escaped (as inside a tool call's ``arguments`` string), URL-encoded (``quote`` and
``quote_plus``), and base64 of the whole value (standard and URL-safe alphabets, padding
stripped). Each occurrence becomes ``••••[card <component id>]`` in the client's copy.

Cost, bounded: at most ``MAX_SECRETS`` (the thread's newest live secrets) times 7 encodings are
searched with ``str.find`` over every string in the row (at most the 1 MiB request body), so a
write costs O(patterns * text) in the worst case and one ``in`` per pattern per string when
nothing matches. Secrets shorter than ``MIN_LENGTH`` characters are not searched (masking every
"42" in a thread would destroy it; such a value is no secret worth the name).
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, quote_plus

MASK = "••••"
MIN_LENGTH = 4
MAX_SECRETS = 32
MASK_RE = re.compile(re.escape(MASK) + r"(?:\[card [^\]]*\])?")


def mask_token(component_id: str | None) -> str:
    return f"{MASK}[card {component_id}]" if component_id else MASK


def encodings(secret: str) -> list[str]:
    """The secret and its common encodings, longest first, each at least MIN_LENGTH long."""
    raw = secret.encode("utf-8", "surrogatepass")
    forms = {
        secret,
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
        quote(secret, safe=""),
        quote_plus(secret, safe=""),
        base64.b64encode(raw).decode().rstrip("="),
        base64.urlsafe_b64encode(raw).decode().rstrip("="),
    }
    return sorted((f for f in forms if len(f) >= MIN_LENGTH), key=len, reverse=True)


@dataclass
class Masker:
    """The secrets of one thread: ``(plaintext, component id)`` pairs."""

    secrets: list[tuple[str, str | None]]
    patterns: list[tuple[str, str]] = field(init=False)
    hits: set[str] = field(init=False, default_factory=set)

    def __post_init__(self) -> None:
        pats = [(form, cid or "") for value, cid in self.secrets
                if len(value) >= MIN_LENGTH for form in encodings(value)]
        self.patterns = sorted(pats, key=lambda p: len(p[0]), reverse=True)

    def text(self, value: str) -> str:
        """``value`` with every occurrence masked (``hits`` collects the cards found)."""
        for form, cid in self.patterns:
            if form in value:
                value = value.replace(form, mask_token(cid or None))
                self.hits.add(cid)
        return value

    def json(self, value: Any) -> Any:
        return walk_strings(value, self.text)


def walk_strings(value: Any, fn: Callable[[str], str]) -> Any:
    """``value`` (JSON-shaped) with ``fn`` applied to every string, keys included."""
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, list):
        return [walk_strings(v, fn) for v in value]
    if isinstance(value, dict):
        return {fn(k) if isinstance(k, str) else k: walk_strings(v, fn) for k, v in value.items()}
    return value


def replace_masks(value: Any, line: str) -> Any:
    """A masked copy with every mask replaced by ``line`` (what the model reads once the
    plaintext is gone: "[secret expired]" or "[secret unavailable]")."""
    return walk_strings(value, lambda s: MASK_RE.sub(line, s) if MASK in s else s)
