"""What a person reads in a push, in his locale: the WebUI's message catalogue, ``en`` and
``zh-CN`` (issue 29), one catalogue for the page, its service worker and the server.

The messages live in ``maxclaw/web/static/messages-<locale>.js``: each file assigns one
strict-JSON object (``self.MAXCLAW_MESSAGES_EN = {...};``) that the browser loads as a script
and this module reads as JSON, once. Keys and ``{param}`` names are the same in both locales
(tests/unit/test_webui_catalogue.py). A counted message has one key per plural form
(``key.one``, ``key.other``: the ``Intl.PluralRules`` categories; ``zh-CN`` has ``other``
only). Times are formatted from ``zoneinfo`` as HH:MM, which both locales write the same way.

What a *model* reads (tool results, answer messages, the hand-off) never comes from here: it
keeps the contract's English wording. Card content the agent wrote is shown as written.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from importlib import resources
from types import MappingProxyType
from typing import Final

LOCALES: Final = ("en", "zh-CN")
DEFAULT_LOCALE: Final = "en"
# the package folder of the WebUI's files, and each locale's catalogue in it
STATIC_PACKAGE: Final = "maxclaw.web"
CATALOGUE_FILES: Final = {"en": "messages-en.js", "zh-CN": "messages-zh-CN.js"}


def parse_catalogue(source: str) -> dict[str, str]:
    """The JSON object a ``messages-<locale>.js`` file assigns (``self.X = {...};``)."""
    start = source.index("= {") + 2
    table = json.loads(source[start:source.rindex("}") + 1])
    if not isinstance(table, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in table.items()):
        raise ValueError("a message catalogue maps keys to strings")
    return table


@cache
def messages(locale: str) -> Mapping[str, str]:
    """The catalogue of a supported ``locale``, read from the WebUI's static files once."""
    source = (resources.files(STATIC_PACKAGE).joinpath("static", CATALOGUE_FILES[locale])
              .read_text(encoding="utf-8"))
    return MappingProxyType(parse_catalogue(source))


# every locale's messages by key (read at import: two small files)
MESSAGES: Final[Mapping[str, Mapping[str, str]]] = MappingProxyType(
    {locale: messages(locale) for locale in LOCALES})


def locale_of(value: str | None) -> str:
    """A supported locale for ``value``: exact, then by language (``zh-Hans-CN``, ``zh`` →
    ``zh-CN``; ``en-GB`` → ``en``); anything else falls back to ``en``, never an error."""
    if not value:
        return DEFAULT_LOCALE
    tag = value.strip().replace("_", "-")
    for known in LOCALES:
        if tag.lower() == known.lower():
            return known
    language = tag.split("-", 1)[0].lower()
    return {"zh": "zh-CN", "en": "en"}.get(language, DEFAULT_LOCALE)


def from_accept_language(header: str | None) -> str:
    """The first supported language of an ``Accept-Language`` header, by quality; ``en``."""
    ranked: list[tuple[float, int, str]] = []
    for n, part in enumerate((header or "").split(",")):
        tag, _, params = part.strip().partition(";")
        quality = 1.0
        if params.strip().startswith("q="):
            try:
                quality = float(params.strip()[2:])
            except ValueError:
                quality = 0.0
        if tag and tag != "*" and quality > 0:
            ranked.append((-quality, n, tag))
    for _, _, tag in sorted(ranked):
        language = tag.split("-", 1)[0].lower()
        if language in ("zh", "en"):
            return locale_of(tag)
    return DEFAULT_LOCALE


def text(locale: str, key: str, **values: object) -> str:
    """The message ``key`` in ``locale`` (``en`` where the locale lacks it)."""
    template = messages(locale_of(locale)).get(key) or messages(DEFAULT_LOCALE)[key]
    return template.format(**values)


def count_text(locale: str, key: str, count: int) -> str:
    """A counted message: ``key.one`` for 1 in English, ``key.other`` otherwise (the plural
    categories ``Intl.PluralRules`` gives for these two locales)."""
    form = "one" if count == 1 and locale_of(locale) == "en" else "other"
    return text(locale, f"{key}.{form}", count=count)
