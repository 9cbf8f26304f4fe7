"""The WebUI speaks from its catalogue only (issue 29): no English a person reads is left as a
literal in ``maxclaw/web/static`` (JS and index.html), and the two catalogues (``en``,
``zh-CN``) have the same keys with the same ``{param}`` names.

The scanner reads the JS with a small tokenizer (comments, strings, template literals,
regular expressions) and flags a string literal when

- it sits where a person reads it: the value of ``text``/``title``/``placeholder``/
  ``aria-label``/``alt``/``label``/``body``, assigned to ``textContent``/``innerText``/
  ``title``/``placeholder``, or passed to ``toast``/``confirm``/``prompt``/``alert``/
  ``showNotification``/``followUp`` (any letters at all count there); or
- anywhere, it reads like words: two words in a row, or one capitalised word;

unless it is a catalogue key (the argument of ``t(``), a technical string on the short list
below, or inside an ``// i18n-ignore-start: <why>`` … ``// i18n-ignore-end`` region (code
and product names the Connect dialog shows as written). In index.html every text node and
``title``/``aria-label``/``placeholder``/``alt`` value counts, unless it is the brand or an
element whose ``data-i18n`` key's catalogue value (in its ``lang``) is exactly its text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from html.parser import HTMLParser
from importlib import resources

import pytest

from maxclaw.prefs.catalogue import CATALOGUE_FILES, LOCALES, messages, parse_catalogue

STATIC = resources.files("maxclaw.web").joinpath("static")
BRAND = "MaxClaw"
# strings that read like words but no person reads as UI text: HTTP header names, DOM and
# CSS names, the brand, platform names in a device's own name, keyboard key names
TECHNICAL = {
    BRAND, "Content-Type", "Accept", "Authorization", "Bearer", "Enter", "Escape",
    "INPUT", "TEXTAREA", "SELECT", "MacIntel", "iPhone/iPad", "Android", "use strict",
    # the server's derived thread states (timeline/projections.py): compared, never shown
    "waiting for you", "working in the background",
}
# where a literal is what a person reads, whatever it looks like
READ_KEYS = r"(?:text|title|placeholder|'aria-label'|\"aria-label\"|alt|label|body)"
READ_CONTEXT = re.compile(
    rf"(?:[{{,]\s*{READ_KEYS}\s*:\s*(?:[^,{{}}]*?\?\s*|[^,{{}}]*?:\s*|[^,{{}}]*?\|\|\s*)?$"
    r"|\.(?:textContent|innerText|title|placeholder)\s*=\s*(?:[^;=]*?[?:|]\s*)?$"
    r"|\b(?:toast|confirm|prompt|alert|showNotification|followUp)\([^()]*$)")
KEY_CONTEXT = re.compile(r"\bt\(\s*$")
WORDS = re.compile(r"[A-Za-z]{2,}[,.;:!?…’']?\s+[A-Za-z]{2,}")
# a property whose value no person reads (class names, ids, roles, types, request fields)
TECHNICAL_KEYS = ("class", "id", "type", "role", "autocomplete", "method", "cache", "rel",
                  "target", "href", "src", "for", "value", "name", "action", "kind", "op",
                  "tag", "spellcheck", "credentials", "scope", "platform", "rows", "maxlength",
                  "'aria-[a-z]+'", "'data-[a-z-]+'", "'Content-Type'", "Accept")
OTHER_KEY = re.compile(rf"[{{,]\s*(?:{'|'.join(TECHNICAL_KEYS)})\s*:\s*"
                       r"(?:[^,{}]*?[?:|]\s*)?[`'\"]?[^,{}`]*$")
CAPITALISED = re.compile(r"^\s*[A-Z][a-z]{2,}[.…!?:]?\s*$")
LETTERS = re.compile(r"[A-Za-z]{2,}")
SELECTOR = re.compile(r"^[\w\s.#:,>()\[\]=\"'*-]+$")
REGEX_BEFORE = set("(,=:[!&|?{};+-*%<>~^") | {""}
REGEX_WORDS = {"return", "typeof", "case", "of", "in", "do", "else", "void"}


@dataclass(frozen=True)
class Literal:
    text: str
    line: int
    before: str  # the code just before it (same statement, up to 160 characters)


def _skip_string(src: str, i: int) -> int:
    quote = src[i]
    i += 1
    while src[i] != quote:
        i += 2 if src[i] == "\\" else 1
    return i + 1


def _template(src: str, i: int, out: list[Literal]) -> int:
    """Read the template literal at ``src[i]`` (a backtick); returns the index after it. Its
    static text (``${…}`` read as a space) is one literal; literals in its expressions too."""
    start, i, text = i, i + 1, []
    while src[i] != "`":
        if src[i] == "\\":
            text.append(src[i:i + 2])
            i += 2
        elif src.startswith("${", i):
            i = _expression(src, i + 2, out)
            text.append(" ")
        else:
            text.append(src[i])
            i += 1
    out.append(Literal("".join(text), src.count("\n", 0, start) + 1,
                       src[max(0, start - 160):start]))
    return i + 1


def _expression(src: str, i: int, out: list[Literal]) -> int:
    depth = 1
    while True:
        c = src[i]
        if c in "'\"":
            end = _skip_string(src, i)
            out.append(Literal(src[i + 1:end - 1], src.count("\n", 0, i) + 1,
                               src[max(0, i - 160):i]))
            i = end
        elif c == "`":
            i = _template(src, i, out)
        elif c == "{":
            depth += 1
            i += 1
        elif c == "}":
            depth -= 1
            i += 1
            if depth == 0:
                return i
        else:
            i += 1


def js_literals(src: str) -> list[Literal]:
    """Every string and template literal of a JS source outside comments, regular
    expressions and ``i18n-ignore`` regions."""
    out: list[Literal] = []
    i, prev, ignoring = 0, "", False
    while i < len(src):
        c = src[i]
        if src.startswith("//", i):
            end = src.find("\n", i)
            end = len(src) if end < 0 else end
            comment = src[i:end]
            if "i18n-ignore-start" in comment:
                assert re.search(r"i18n-ignore-start: \S", comment), "an ignore region says why"
                ignoring = True
            elif "i18n-ignore-end" in comment:
                ignoring = False
            i = end
        elif src.startswith("/*", i):
            i = src.index("*/", i) + 2
        elif c in "'\"":
            end = _skip_string(src, i)
            if not ignoring:
                out.append(Literal(src[i + 1:end - 1], src.count("\n", 0, i) + 1,
                                   src[max(0, i - 160):i]))
            i, prev = end, "a"
        elif c == "`":
            found: list[Literal] = []
            i = _template(src, i, found)
            if not ignoring:
                out.extend(found)
            prev = "a"
        elif c == "/" and (prev in REGEX_BEFORE or prev in REGEX_WORDS):
            i += 1
            in_class = False
            while in_class or src[i] != "/":
                if src[i] == "\\":
                    i += 1
                elif src[i] == "[":
                    in_class = True
                elif src[i] == "]":
                    in_class = False
                i += 1
            i += 1
            while i < len(src) and src[i].isalpha():
                i += 1
            prev = "a"
        elif c.isalnum() or c in "_$":
            word = re.match(r"[\w$]+", src[i:])
            assert word is not None
            prev = word.group(0) if word.group(0) in REGEX_WORDS else "a"
            i += len(word.group(0))
        elif c.isspace():
            i += 1
        else:
            prev = c if c not in ")]" else "a"
            i += 1
    return out


def flagged(literal: Literal) -> bool:
    """Whether a literal is English a person would read."""
    text = literal.text.replace("\\n", " ").strip()
    before = literal.before.split(";")[-1] if ";" in literal.before else literal.before
    if not LETTERS.search(text) or text in TECHNICAL:
        return False
    if KEY_CONTEXT.search(before):
        return False  # a catalogue key
    if READ_CONTEXT.search(before):
        return True
    if OTHER_KEY.search(before):
        return False
    if re.search(r"\b(?:querySelector(?:All)?|closest|matchMedia)\(\s*(?:[^()]*\+\s*)?$", before):
        return False  # a CSS selector or media query
    if re.search(r"(?:\.close\(\s*\d+,|\bconsole\.\w+\()\s*$", before):
        return False  # a WebSocket close reason, a console line (for developers)
    if "\n" not in literal.text and SELECTOR.match(text) and not WORDS.search(
            re.sub(r"\[[^\]]*\]|\([^)]*\)|[.#][\w-]+", "", text)):
        return False
    return bool(WORDS.search(text) or CAPITALISED.match(text))


def scan_js(src: str) -> list[str]:
    return [f"line {lit.line}: {lit.text!r}" for lit in js_literals(src) if flagged(lit)]


class _HtmlScan(HTMLParser):
    """Text nodes and read attributes of index.html that are not from the catalogue."""

    def __init__(self, catalogues: dict[str, dict[str, str]]) -> None:
        super().__init__()
        self.catalogues = catalogues
        self.stack: list[tuple[str, dict[str, str | None]]] = []
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        for attr in ("title", "aria-label", "placeholder", "alt"):
            value = named.get(attr)
            if value and LETTERS.search(value) and value != BRAND:
                self.found.append(f"<{tag} {attr}={value!r}>")
        if tag not in ("meta", "link", "br", "img", "input"):
            self.stack.append((tag, named))

    def handle_endtag(self, tag: str) -> None:
        while self.stack and self.stack.pop()[0] != tag:
            pass

    def handle_data(self, data: str) -> None:
        text = " ".join(data.split())
        if not LETTERS.search(text) or text == BRAND:
            return
        if self.stack and self.stack[-1][0] in ("script", "style"):
            return
        attrs = self.stack[-1][1] if self.stack else {}
        key, lang = attrs.get("data-i18n"), attrs.get("lang") or "en"
        if key and self.catalogues.get(str(lang), {}).get(str(key)) == text:
            return
        self.found.append(f"text {text!r}")


def scan_html(src: str, catalogues: dict[str, dict[str, str]]) -> list[str]:
    scan = _HtmlScan(catalogues)
    scan.feed(src)
    return scan.found


def catalogues() -> dict[str, dict[str, str]]:
    return {locale: dict(messages(locale)) for locale in LOCALES}


def static_js() -> list[str]:
    return sorted(entry.name for entry in STATIC.iterdir()
                  if entry.name.endswith(".js") and not entry.name.startswith("messages-"))


# ---- the scanner can fail ---------------------------------------------------------------------

SAMPLE_WITH_LITERALS = r"""
import { h, t } from './dom.js';
const RE = /^"(it's)"\/[`']$/;  // a regex with quotes is not a string
function view(x) {
  const el = h('p', { class: 'note', text: 'Done' });
  el.textContent = x ? 'Saved' : t('ok.key');
  el.append(h('button', { 'aria-label': `Remove ${x.name}` }, 'Remove it now'));
  toast(`Answered: ${x.title || 'question'}.`);
  return h('span', {}, x ? `${x.count} open questions` : t('panel.empty'));
}
"""
SAMPLE_CLEAN = r"""
import { h, t } from './dom.js';
const RE = /^'(x)'$/;
// 'Comments are not shown'
function view(x) {
  const el = h('p', { class: 'note primary', text: t('card.send') });
  el.querySelector('.controls button.option:not([disabled])');
  el.setAttribute('data-state', 'online');
  const label = t('card.options_label', { question: x.q });
  return h('span', { 'aria-label': label }, t(`status.${x.s}`));
}
// i18n-ignore-start: code shown as written
const CODE = ['from agents import Agent, Runner'];
// i18n-ignore-end
"""


def test_the_scanner_flags_literals_a_person_reads() -> None:
    found = scan_js(SAMPLE_WITH_LITERALS)
    texts = " ".join(found)
    for literal in ("'Done'", "'Saved'", "'Remove  '", "'Remove it now'", "'Answered:  .'",
                    "'question'", "'  open questions'"):
        assert literal in texts, (literal, found)
    assert "it's" not in texts and "ok.key" not in texts


def test_the_scanner_passes_keys_selectors_and_ignored_code() -> None:
    assert scan_js(SAMPLE_CLEAN) == []


def test_the_html_scanner_flags_text_and_attributes() -> None:
    cats = {"en": {"a.b": "Hello there."}, "zh-CN": {"a.b": "你好。"}}
    page = ('<html><head><title>MaxClaw</title></head><body>'
            '<p data-i18n="a.b">Hello there.</p><p lang="zh-CN" data-i18n="a.b">你好。</p>'
            '<p data-i18n="a.b">Hello, stale.</p><button aria-label="Close it">x</button>'
            '<p>Loose words</p><script>var x = "not text";</script></body></html>')
    assert scan_html(page, cats) == [
        "text 'Hello, stale.'", "<button aria-label='Close it'>", "text 'Loose words'"]


# ---- the WebUI --------------------------------------------------------------------------------

@pytest.mark.parametrize("name", static_js())
def test_no_english_literal_in_the_webui_js(name: str) -> None:
    source = STATIC.joinpath(name).read_text(encoding="utf-8")
    assert scan_js(source) == [], f"{name}: put these in the catalogue (messages-*.js)"


def test_no_english_literal_in_index_html() -> None:
    source = STATIC.joinpath("index.html").read_text(encoding="utf-8")
    assert scan_html(source, catalogues()) == []


def test_both_catalogues_have_the_same_keys_and_params() -> None:
    cats = catalogues()
    en, zh = cats["en"], cats["zh-CN"]
    assert sorted(set(en) ^ set(zh)) == []
    params = re.compile(r"\{([A-Za-z_]\w*)\}")
    differ = {key: (en[key], zh[key]) for key in en
              if set(params.findall(en[key])) != set(params.findall(zh[key]))}
    assert differ == {}
    assert [key for key in en if not en[key].strip() or not zh[key].strip()] == []
    # a counted message has its `other` form in both (what Intl.PluralRules falls back to)
    counted = {key.rsplit(".", 1)[0] for key in en if key.endswith((".one", ".few", ".many"))}
    assert sorted(base for base in counted if f"{base}.other" not in en) == []


def test_the_catalogue_files_are_strict_json_assigned_once() -> None:
    for locale, name in CATALOGUE_FILES.items():
        source = STATIC.joinpath(name).read_text(encoding="utf-8")
        variable = "MAXCLAW_MESSAGES_" + locale.upper().replace("-", "_")
        assert source.count(f"self.{variable} = {{") == 1
        assert parse_catalogue(source) == dict(messages(locale))


def test_every_key_the_js_names_is_in_the_catalogue() -> None:
    en = catalogues()["en"]
    missing = []
    for name in [*static_js(), "sw.js"]:
        source = STATIC.joinpath(name).read_text(encoding="utf-8")
        for key in re.findall(r"\bt\(\s*'([^']+)'", source):
            if key not in en and not any(k.startswith(f"{key}.") for k in en):
                missing.append(f"{name}: {key}")
        for prefix in re.findall(r"\bt\(\s*`([\w.-]+)\.\$\{", source):
            if not any(k.startswith(f"{prefix}.") for k in en):
                missing.append(f"{name}: {prefix}.*")
    assert missing == []
