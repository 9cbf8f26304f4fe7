// The page frame of a signed-in session: top bar, reconnect banner, threads, timeline with
// composer, decisions panel. Returns the elements the session fills in.

import { h, replaceChildren, t } from './dom.js';
import { openConnect, openPhoneSignin } from './connect.js';
import { openNotifications } from './notifications.js';
import { localeSwitch } from './locale.js';
import { themeButton } from './theme.js';

const KINDS = ['main', 'normal', 'isolated', 'background'];

/** A thread kind's name in his locale. */
export function kindLabel(kind) {
  return KINDS.includes(kind) ? t(`kind.${kind}`) : kind;
}

// the server's derived thread states (timeline/projections.py), by catalogue key
const STATES = { running: 'thread.state.running', idle: 'thread.state.idle',
  'working in the background': 'thread.state.working' };

/** "working in the background (2 jobs)": the thread's running background jobs, as the
 * runtime reported their starts and ends (null when none runs). */
export function backgroundLabel(thread) {
  const jobs = thread.background_jobs || 0;
  return jobs ? t('thread.background', { count: jobs }) : null;
}

/** The text of a thread's derived state in the list. */
export function stateLabel(thread) {
  if (thread.state === 'waiting for you') return t('thread.state.waiting', { count: thread.open_cards });
  if (thread.state === 'working in the background') return backgroundLabel(thread) || t(STATES[thread.state]);
  return STATES[thread.state] ? t(STATES[thread.state]) : thread.state;
}

export function threadLabel(thread) {
  if (thread.kind === 'main') return thread.title || t('kind.main');
  return thread.title || t('thread.untitled');
}

export function buildLayout(root, session) {
  const el = {};
  el.navToggle = h('button', {
    type: 'button', class: 'icon-button nav-toggle', 'aria-controls': 'threads',
    'aria-expanded': 'false', 'aria-label': t('layout.show_threads'), onclick: () => session.toggleNav(),
  }, '☰');
  el.panelCount = h('span', { class: 'count', 'aria-hidden': 'true' });
  el.panelToggle = h('button', {
    type: 'button', class: 'panel-toggle', 'aria-controls': 'decisions', 'aria-expanded': 'false',
    onclick: () => session.togglePanel(),
  }, `${t('layout.decisions')} `, el.panelCount);
  el.conn = h('span', { class: 'conn', role: 'status', 'data-state': 'connecting', text: t('layout.connecting') });
  const signOut = h('button', {
    type: 'button', class: 'link-button', onclick: () => session.signOut(),
    'aria-label': t('layout.sign_out_label', { name: session.me.name }),
  }, t('layout.sign_out'));
  // on a phone only the icon shows (the top bar is full); the name stays for screen readers
  el.notificationsButton = h('button', {
    type: 'button', class: 'link-button notifications-button', id: 'notifications-button',
    'aria-haspopup': 'dialog', 'aria-label': t('layout.notifications'), title: t('layout.notifications'),
    onclick: () => openNotifications(session),
  }, h('img', { src: '/assets/icon-192.png', alt: '', width: '18', height: '18' }),
  h('span', { class: 'label', text: t('layout.notifications') }));
  const top = h('header', { class: 'topbar' },
    el.navToggle,
    h('span', { class: 'brand', text: t('app.brand') }),
    h('span', { class: 'who', text: session.me.name }),
    el.conn,
    h('span', { class: 'spacer' }),
    el.panelToggle,
    el.notificationsButton,
    themeButton(),
    signOut);

  el.bannerText = h('span', { text: t('layout.offline_reconnecting') });
  el.banner = h('div', { class: 'banner', id: 'conn-banner', role: 'alert', hidden: true },
    el.bannerText,
    h('button', { type: 'button', class: 'link-button', onclick: () => session.live.retryNow() },
      t('layout.retry_now')));

  el.threadList = h('ul', { class: 'thread-list' });
  const newTitle = h('input', { type: 'text', 'aria-label': t('layout.new_title'), placeholder: t('layout.new_placeholder'), maxlength: '500' });
  const newKind = h('select', { 'aria-label': t('layout.new_kind') },
    h('option', { value: 'normal', text: t('layout.kind.normal') }),
    h('option', { value: 'isolated', text: t('kind.isolated') }),
    h('option', { value: 'background', text: t('kind.background') }));
  const newForm = h('form', {
    class: 'new-thread', 'aria-label': t('layout.create_form'),
    onsubmit: async (event) => {
      event.preventDefault();
      if (await session.createThread(newTitle.value.trim(), newKind.value)) newTitle.value = '';
    },
  }, newTitle, newKind, h('button', { type: 'submit', 'aria-label': t('layout.create_label') }, t('layout.create')));
  el.connectButton = h('button', {
    type: 'button', class: 'link-button', id: 'connect-button', 'aria-haspopup': 'dialog',
    onclick: () => openConnect(session),
  }, t('connect.title'));
  el.phoneButton = h('button', {
    type: 'button', class: 'link-button', id: 'phone-button', 'aria-haspopup': 'dialog',
    onclick: () => openPhoneSignin(session),
  }, t('phone.title'));
  const nav = h('nav', { id: 'threads', class: 'threads', 'aria-label': t('layout.threads') },
    h('div', { class: 'drawer-head' },
      h('h2', { text: t('layout.threads') }),
      h('button', { type: 'button', class: 'icon-button drawer-close', 'aria-label': t('layout.close_threads'),
        onclick: () => session.toggleNav() }, '×')),
    el.threadList, newForm,
    h('div', { class: 'nav-tools' }, el.connectButton, el.phoneButton, localeSwitch(session)));

  el.nudge = h('div', { class: 'nudge-slot', hidden: true });
  el.threadTitle = h('h1', { class: 'thread-title', id: 'thread-title', text: t('common.loading') });
  el.threadMeta = h('p', { class: 'thread-meta' });
  el.timeline = h('ol', {
    id: 'timeline', class: 'timeline', 'aria-labelledby': 'thread-title',
    'aria-live': 'polite', 'aria-relevant': 'additions',
  });
  el.scroller = h('div', { class: 'scroller', tabindex: '-1' }, el.timeline);
  el.composerInput = h('textarea', {
    id: 'composer-input', rows: '2', 'aria-label': t('layout.message'), placeholder: t('layout.message_placeholder'),
    onkeydown: (event) => {
      if (event.key === 'Enter' && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        session.sendMessage();
      }
    },
  });
  el.composerSend = h('button', { type: 'submit', class: 'primary', 'aria-label': t('layout.send_label') }, t('card.send'));
  el.composerError = h('p', { class: 'error', role: 'alert', hidden: true });
  const composer = h('form', {
    class: 'composer', 'aria-label': t('layout.write'),
    onsubmit: (event) => {
      event.preventDefault();
      session.sendMessage();
    },
  }, el.composerInput, el.composerSend);
  const main = h('main', { class: 'main', id: 'main' },
    el.nudge,
    h('header', { class: 'thread-head' }, el.threadTitle, el.threadMeta),
    el.scroller,
    el.composerError,
    composer);

  el.decisionList = h('ul', { class: 'decision-list' });
  el.panelHeading = h('h2', { tabindex: '-1', id: 'decisions-title', text: t('layout.decisions') });
  const panel = h('aside', { id: 'decisions', class: 'panel', 'aria-labelledby': 'decisions-title' },
    h('div', { class: 'drawer-head' },
      el.panelHeading,
      h('button', { type: 'button', class: 'icon-button drawer-close', 'aria-label': t('layout.close_decisions'),
        onclick: () => session.togglePanel() }, '×')),
    h('p', { class: 'help', text: t('layout.panel_help') }),
    el.decisionList);

  el.toasts = h('div', { class: 'toasts', role: 'status', 'aria-live': 'polite' });
  replaceChildren(root, top, el.banner, h('div', { class: 'layout' }, nav, main, panel), el.toasts);
  root.removeAttribute('aria-busy');
  document.addEventListener('keydown', (event) => {
    if (event.key !== 'Escape' || session.stopped) return;
    if (document.body.classList.contains('panel-open')) session.togglePanel();
    else if (document.body.classList.contains('nav-open')) session.toggleNav();
  });
  return el;
}
