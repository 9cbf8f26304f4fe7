// Light or dark: Max's choice (kept on this device), else the system's (`prefers-color-scheme`,
// followed live). The stylesheet reads `html[data-theme]`; nothing else knows about themes.

import { h, t } from './dom.js';

const KEY = 'maxclaw.theme';
const CHOICES = ['system', 'dark', 'light'];
const dark = window.matchMedia('(prefers-color-scheme: dark)');

/** Max's choice on this device: 'system' (the default), 'dark' or 'light'. */
export function themeChoice() {
  let stored = null;
  try {
    stored = localStorage.getItem(KEY);
  } catch {
    stored = null; // storage refused (private mode): the system's theme
  }
  return CHOICES.includes(stored) ? stored : 'system';
}

/** Apply the choice to the page (called at boot, on a change and when the system's flips). */
export function applyTheme(choice = themeChoice()) {
  const resolved = choice === 'system' ? (dark.matches ? 'dark' : 'light') : choice;
  document.documentElement.dataset.theme = resolved;
  const meta = document.querySelector('meta[name="theme-color"]');
  if (meta) meta.setAttribute('content', resolved === 'dark' ? '#14171c' : '#2456c7');
  return resolved;
}

dark.addEventListener('change', () => applyTheme());

/** The top bar's switch: system → dark → light → system. */
export function themeButton() {
  const button = h('button', { type: 'button', class: 'link-button theme-button', id: 'theme-button' });
  const show = () => {
    const choice = themeChoice();
    button.textContent = t(`theme.${choice}`);
    button.dataset.choice = choice;
  };
  button.addEventListener('click', () => {
    const next = CHOICES[(CHOICES.indexOf(themeChoice()) + 1) % CHOICES.length];
    try {
      localStorage.setItem(KEY, next);
    } catch {
      // not kept on this device; applied for this page only
    }
    applyTheme(next);
    show();
    button.dataset.choice = next;
  });
  show();
  return button;
}
