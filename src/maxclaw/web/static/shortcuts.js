// Keyboard shortcuts: 1–9 pick an option of the current card, j/k move between the open cards
// of the thread on screen, / focuses the search box (when there is one), ? lists them. Keys
// typed into a field, or with a modifier, are the field's, never a shortcut.

import { h, t } from './dom.js';

// the keys, and what each does (catalogue keys: read when the list is drawn, in his locale)
const SHORTCUTS = [
  ['1–9', 'shortcuts.pick'],
  ['j / k', 'shortcuts.move'],
  ['/', 'shortcuts.search'],
  ['?', 'shortcuts.list'],
];
let dialog = null;

function typing(target) {
  return target instanceof HTMLElement && (target.isContentEditable
    || ['INPUT', 'TEXTAREA', 'SELECT'].includes(target.tagName));
}

/** The open cards of the timeline on screen, in reading order. */
function openCards() {
  return [...document.querySelectorAll('#timeline .component')]
    .filter((el) => el.querySelector('.controls button.option:not([disabled]), '
      + '.controls input[type="checkbox"]:not([disabled])'));
}

function currentCard() {
  const active = document.activeElement;
  const holder = active && active.closest ? active.closest('#timeline .component') : null;
  return holder || document.querySelector('#timeline .component.kbd-current');
}

function moveTo(card) {
  for (const el of document.querySelectorAll('.component.kbd-current')) el.classList.remove('kbd-current');
  card.classList.add('kbd-current');
  card.focus({ preventScroll: true });
  card.scrollIntoView({ block: 'nearest' });
}

function step(delta) {
  const cards = openCards();
  if (!cards.length) return;
  const at = cards.indexOf(currentCard());
  const next = at < 0 ? (delta > 0 ? 0 : cards.length - 1)
    : Math.min(cards.length - 1, Math.max(0, at + delta));
  moveTo(cards[next]);
}

/** The n-th option (1-based) of the current card: a button is clicked, a checkbox toggled. */
function pick(n) {
  const card = currentCard();
  if (!card) return false;
  const options = [...card.querySelectorAll(
    '.controls button.option:not(.other):not(.action), .controls input[type="checkbox"]')];
  const option = options[n - 1];
  if (!option || option.disabled) return false;
  option.click();
  return true;
}

function showList() {
  if (!dialog) {
    const list = h('dl', { class: 'shortcuts-list' });
    for (const [keys, what] of SHORTCUTS) list.append(h('dt', {}, h('kbd', { text: keys })), h('dd', { text: t(what) }));
    dialog = h('dialog', { class: 'notifications', id: 'shortcuts', 'aria-labelledby': 'shortcuts-title' },
      h('h2', { id: 'shortcuts-title', text: t('shortcuts.title') }), list,
      h('button', { type: 'button', class: 'primary', onclick: () => dialog.close() }, t('shortcuts.close')));
    document.body.append(dialog);
  }
  if (!dialog.open) dialog.showModal();
}

function onKey(event) {
  if (event.defaultPrevented || event.ctrlKey || event.metaKey || event.altKey) return;
  if (typing(event.target) || document.querySelector('dialog[open]:not(#shortcuts)')) return;
  const { key } = event;
  let handled = true;
  if (key >= '1' && key <= '9') handled = pick(Number(key));
  else if (key === 'j') step(1);
  else if (key === 'k') step(-1);
  else if (key === '?') showList();
  else if (key === '/') {
    const search = document.querySelector('input[type="search"]');
    handled = Boolean(search);
    if (search) search.focus();
  } else handled = false;
  if (handled) event.preventDefault();
}

/** Listen once for the page's lifetime. */
export function installShortcuts() {
  document.addEventListener('keydown', onKey);
}
