"""Finding a thread's secrets in what the agent writes, and masking them for clients.

A secret is searched as itself and in the encodings an agent most often passes it on in:
JSON-escaped (as inside a tool call's ``arguments`` string), URL-encoded (``quote`` and
``quote_plus``), and base64 of the whole value (standard and URL-safe alphabets, padding
stripped). Each occurrence becomes ``••••[card <component id>]`` in the client's copy.

Cost, bounded by the row's size whatever the thread holds: the row's JSON values are written
out as JSON text (the text the insert then sends, ``db.database.JsonText``) and searched once,
with its body, for every pattern at the same time (Aho-Corasick, ``pyahocorasick``), in C;
the patterns there are the JSON-escaped spelling of each form, because that is how any string
of the row spells it in that text. Only a row
that matches (it repeats a secret, or rarely something that looks like one across two
strings) is walked string by string to mask each occurrence, and that walk refuses a row of
more than ``MAX_STRINGS`` strings. At most ``MAX_VALUES`` distinct secrets (the thread's
newest, at most ``MAX_PATTERN_CHARS`` of patterns in all) are searched, so building the
automaton is bounded too. Secrets shorter than ``MIN_LENGTH`` characters are not searched
(masking every "42" in a thread would destroy it; such a value is no secret worth the name).
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, quote_plus

import ahocorasick

from maxclaw.errors import Invalid

MASK = "••••"
MIN_LENGTH = 4
MAX_SECRETS = 32  # secret rows read per thread (a whole-card answer's row holds several)
MAX_VALUES = 64  # distinct secret values searched per thread, newest first
MAX_PATTERN_CHARS = 256 * 1024  # and their patterns in all (the automaton's size)
MAX_STRINGS = 20_000  # strings (keys included) of a row that repeats a secret
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


def _escaped(text: str) -> str:
    """``text`` as it is spelled inside a JSON string of ``json_text``."""
    return json.dumps(text)[1:-1]


def json_text(value: Any) -> str:
    """``value`` as JSON text, spelled as the jsonb codec spells it (``json.dumps``): every
    string of it JSON-escaped (``_escaped``), character by character."""
    return json.dumps(value)


def _searched(secrets: list[tuple[str, str | None]]) -> dict[str, str]:
    """Each form to search and its component id: the first ``MAX_VALUES`` distinct values
    (the caller lists the newest first) within ``MAX_PATTERN_CHARS``."""
    forms: dict[str, str] = {}
    seen: set[str] = set()
    budget = MAX_PATTERN_CHARS
    for value, cid in secrets:
        if len(value) < MIN_LENGTH or value in seen:
            continue
        found = [f for f in encodings(value) if f not in forms]
        cost = sum(len(f) for f in found)
        if len(seen) >= MAX_VALUES or cost > budget:
            break
        seen.add(value)
        budget -= cost
        for form in found:
            forms[form] = cid or ""
    return forms


def _automaton(words: dict[str, str]) -> Any:
    machine = ahocorasick.Automaton()
    for word, cid in words.items():
        machine.add_word(word, (len(word), cid))
    machine.make_automaton()
    return machine


class Masker:
    """The secrets of one thread: ``(plaintext, component id)`` pairs, newest first."""

    def __init__(self, secrets: list[tuple[str, str | None]]) -> None:
        self.forms = _searched(secrets)
        self.hits: set[str] = set()
        self._strings = 0
        self._plain: Any = None
        self._escaped: Any = None

    def found_in(self, body: str | None, *texts: str | None) -> bool:
        """Whether ``body`` (plain text) or ``texts`` (``json_text``) may hold a secret: one
        pass over each, every pattern at once."""
        if not self.forms:
            return False
        if self._escaped is None:
            self._plain = _automaton(self.forms)
            self._escaped = _automaton({_escaped(f): c for f, c in self.forms.items()})
        if body is not None and any(True for _ in self._plain.iter(body)):
            return True
        return any(any(True for _ in self._escaped.iter(text)) for text in texts if text)

    def text(self, value: str) -> str:
        """``value`` with every occurrence masked (the leftmost, longest ones; ``hits``
        collects the cards found)."""
        self._strings += 1
        if self._strings > MAX_STRINGS:
            raise Invalid.at(["body"], f"this row repeats a secret answer of its thread and "
                                       f"holds more than {MAX_STRINGS:,} strings; send fewer "
                                       "values (a large result as one string)")
        if not self.forms:
            return value
        if self._plain is None:
            self._plain = _automaton(self.forms)
        out: list[str] = []
        start = 0
        for end, (length, cid) in self._plain.iter_long(value):
            out.append(value[start:end + 1 - length])
            out.append(mask_token(cid or None))
            self.hits.add(cid)
            start = end + 1
        if not out:
            return value
        out.append(value[start:])
        return "".join(out)

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
