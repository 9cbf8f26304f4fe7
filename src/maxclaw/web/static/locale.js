// His language: the per-user `locale` setting (GET/PATCH /v1/settings), remembered on this
// device so the sign-in page and the next start speak it before the settings load, and told to
// the service worker for the notices it shows. The switch in the top bar changes it.

import { h, t } from './dom.js';
import { tellWorkerLocale } from './notifications.js';

const KEY = 'maxclaw.locale';
const i18n = () => self.MaxClawI18n;

/** The locale this device last used, else the browser's first supported language. */
export function currentLocale() {
  let stored = null;
  try {
    stored = localStorage.getItem(KEY);
  } catch {
    stored = null; // storage refused (private mode)
  }
  return stored ? i18n().localeOf(stored) : i18n().browserLocale();
}

/** Speak `locale` from now on (an unknown one is `en`); remembered on this device. */
export function useLocale(locale) {
  const chosen = i18n().setLocale(locale);
  try {
    localStorage.setItem(KEY, chosen);
  } catch {
    // not kept on this device
  }
  tellWorkerLocale(chosen);
  return chosen;
}

/** The top bar's language switch: each language named in its own words. */
export function localeSwitch(session) {
  const select = h('select', {
    id: 'locale-select', class: 'locale-select', 'aria-label': t('layout.language'),
    title: t('layout.language'),
    onchange: (event) => session.changeLocale(event.target.value),
  }, i18n().LOCALES.map((locale) => h('option', {
    value: locale, text: t(`locale.${locale}`), selected: locale === i18n().locale(),
  })));
  return select;
}
