// What a person reads, in his language (issue 29): `t(key, params)` looks a message up in the
// catalogue of the chosen locale (messages-en.js, messages-zh-CN.js: one strict-JSON object
// each, which the server reads too for its push texts). A classic script, not a module, so the
// page (index.html) and the service worker (importScripts) share it; it sets `self.MaxClawI18n`.
//
// - `{name}` in a message is replaced by `params.name`.
// - A counted message has one key per plural category (`key.one`, `key.other`, as
//   `Intl.PluralRules` names them); `t(key, { count })` picks the form for the locale.
// - Dates and relative times come from `Intl.DateTimeFormat` / `Intl.RelativeTimeFormat` in the
//   chosen locale. An unknown locale falls back to `en`, silently.
// What a model reads is not here: it keeps the contract's English (server side). Card content
// written by an agent is shown as written.

/* global self */
(function install(scope) {
  'use strict';

  const LOCALES = ['en', 'zh-CN'];
  const DEFAULT = 'en';
  const catalogues = () => ({
    en: scope.MAXCLAW_MESSAGES_EN || {},
    'zh-CN': scope.MAXCLAW_MESSAGES_ZH_CN || {},
  });
  let current = DEFAULT;
  const formats = new Map();

  /** A supported locale for a tag: exact, then by language (`zh-Hans-CN` → `zh-CN`,
   * `en-GB` → `en`); anything else is `en` (never an error). Mirrors prefs/catalogue.py. */
  function localeOf(tag) {
    if (!tag || typeof tag !== 'string') return DEFAULT;
    const clean = tag.trim().replace(/_/g, '-');
    const exact = LOCALES.find((known) => known.toLowerCase() === clean.toLowerCase());
    if (exact) return exact;
    const language = clean.split('-')[0].toLowerCase();
    return language === 'zh' ? 'zh-CN' : DEFAULT;
  }

  /** The browser's first supported language (`navigator.languages`), else `en`. */
  function browserLocale() {
    const tags = (scope.navigator && (scope.navigator.languages || [scope.navigator.language])) || [];
    for (const tag of tags) {
      const language = String(tag || '').split('-')[0].toLowerCase();
      if (language === 'zh' || language === 'en') return localeOf(tag);
    }
    return DEFAULT;
  }

  function setLocale(tag) {
    current = localeOf(tag);
    formats.clear();
    if (scope.document && scope.document.documentElement) scope.document.documentElement.lang = current;
    return current;
  }

  function format(kind, options, make) {
    const key = `${kind}|${JSON.stringify(options)}`;
    if (!formats.has(key)) formats.set(key, make());
    return formats.get(key);
  }

  function lookup(table, key, params) {
    if (params && typeof params.count === 'number') {
      const rules = format('plural', {}, () => new Intl.PluralRules(current));
      const form = table[`${key}.${rules.select(params.count)}`];
      if (form !== undefined) return form;
      if (table[`${key}.other`] !== undefined) return table[`${key}.other`];
    }
    return table[key];
  }

  /** The message `key` in the chosen locale with `{name}` filled from `params`; the English
   * one where the locale lacks it (a test keeps both complete), else the key itself. */
  function t(key, params) {
    const all = catalogues();
    let template = lookup(all[current], key, params);
    if (template === undefined) template = lookup(all[DEFAULT], key, params);
    if (template === undefined) return key;
    return template.replace(/\{([A-Za-z_][A-Za-z0-9_]*)\}/g, (whole, name) => (
      params && params[name] !== undefined && params[name] !== null ? String(params[name]) : whole));
  }

  /** "14:05" today, "3月5日 14:05" / "Mar 5, 14:05" otherwise, in the chosen locale. */
  function formatTime(iso) {
    if (!iso) return '';
    const when = new Date(iso);
    if (Number.isNaN(when.getTime())) return '';
    const today = new Date().toDateString() === when.toDateString();
    const options = today ? { hour: '2-digit', minute: '2-digit' }
      : { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit' };
    return format('date', options, () => new Intl.DateTimeFormat(current, options)).format(when);
  }

  /** "5 minutes ago" / "5分钟前", "now" / "现在", "in 2 hours" / "2小时后". */
  function relativeTime(iso, now = Date.now()) {
    if (!iso) return '';
    const when = new Date(iso).getTime();
    if (Number.isNaN(when)) return '';
    const seconds = Math.round((when - now) / 1000);
    const rtf = format('relative', {}, () => new Intl.RelativeTimeFormat(current, { numeric: 'auto' }));
    const steps = [['second', 60], ['minute', 60], ['hour', 24], ['day', 7], ['week', 4.35],
      ['month', 12], ['year', Infinity]];
    let value = seconds;
    for (const [unit, size] of steps) {
      if (Math.abs(value) < size) {
        return rtf.format(unit === 'second' && Math.abs(value) < 10 ? 0 : Math.round(value), unit);
      }
      value /= size;
    }
    return '';
  }

  scope.MaxClawI18n = {
    LOCALES, DEFAULT, localeOf, browserLocale, setLocale, t, formatTime, relativeTime,
    locale: () => current,
  };
}(self));
