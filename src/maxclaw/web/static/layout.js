// The page frame of a signed-in session: top bar, reconnect banner, threads, timeline with
// composer, decisions panel. Returns the elements the session fills in.

import { h, replaceChildren } from './dom.js';
import { openNotifications } from './notifications.js';

export const KIND_LABELS = {
  main: 'Main', normal: 'Thread', isolated: 'Isolated', background: 'Background',
};

export function threadLabel(thread) {
  if (thread.kind === 'main') return thread.title || 'Main';
  return thread.title || 'Untitled thread';
}

export function buildLayout(root, session) {
  const el = {};
  el.navToggle = h('button', {
    type: 'button', class: 'icon-button nav-toggle', 'aria-controls': 'threads',
    'aria-expanded': 'false', 'aria-label': 'Show the threads', onclick: () => session.toggleNav(),
  }, '☰');
  el.panelCount = h('span', { class: 'count', 'aria-hidden': 'true' });
  el.panelToggle = h('button', {
    type: 'button', class: 'panel-toggle', 'aria-controls': 'decisions', 'aria-expanded': 'false',
    onclick: () => session.togglePanel(),
  }, 'Decisions ', el.panelCount);
  el.conn = h('span', { class: 'conn', role: 'status', 'data-state': 'connecting', text: 'Connecting…' });
  const signOut = h('button', {
    type: 'button', class: 'link-button', onclick: () => session.signOut(),
    'aria-label': `Sign out ${session.me.name}`,
  }, 'Sign out');
  // on a phone only the icon shows (the top bar is full); the name stays for screen readers
  el.notificationsButton = h('button', {
    type: 'button', class: 'link-button notifications-button', id: 'notifications-button',
    'aria-haspopup': 'dialog', 'aria-label': 'Notifications', title: 'Notifications',
    onclick: () => openNotifications(session),
  }, h('img', { src: '/assets/icon-192.png', alt: '', width: '18', height: '18' }),
  h('span', { class: 'label', text: 'Notifications' }));
  const top = h('header', { class: 'topbar' },
    el.navToggle,
    h('span', { class: 'brand', text: 'MaxClaw' }),
    h('span', { class: 'who', text: session.me.name }),
    el.conn,
    h('span', { class: 'spacer' }),
    el.panelToggle,
    el.notificationsButton,
    signOut);

  el.bannerText = h('span', { text: 'Offline: reconnecting…' });
  el.banner = h('div', { class: 'banner', id: 'conn-banner', role: 'alert', hidden: true },
    el.bannerText,
    h('button', { type: 'button', class: 'link-button', onclick: () => session.live.retryNow() },
      'Retry now'));

  el.threadList = h('ul', { class: 'thread-list' });
  const newTitle = h('input', { type: 'text', 'aria-label': 'New thread title', placeholder: 'New thread…', maxlength: '500' });
  const newKind = h('select', { 'aria-label': 'New thread kind' },
    h('option', { value: 'normal', text: 'Normal' }),
    h('option', { value: 'isolated', text: 'Isolated' }),
    h('option', { value: 'background', text: 'Background' }));
  const newForm = h('form', {
    class: 'new-thread', 'aria-label': 'Create a thread',
    onsubmit: async (event) => {
      event.preventDefault();
      if (await session.createThread(newTitle.value.trim(), newKind.value)) newTitle.value = '';
    },
  }, newTitle, newKind, h('button', { type: 'submit', 'aria-label': 'Create the thread' }, 'Create'));
  const nav = h('nav', { id: 'threads', class: 'threads', 'aria-label': 'Threads' },
    h('div', { class: 'drawer-head' },
      h('h2', { text: 'Threads' }),
      h('button', { type: 'button', class: 'icon-button drawer-close', 'aria-label': 'Close the threads',
        onclick: () => session.toggleNav() }, '×')),
    el.threadList, newForm);

  el.nudge = h('div', { class: 'nudge-slot', hidden: true });
  el.threadTitle = h('h1', { class: 'thread-title', id: 'thread-title', text: 'Loading…' });
  el.threadMeta = h('p', { class: 'thread-meta' });
  el.timeline = h('ol', {
    id: 'timeline', class: 'timeline', 'aria-labelledby': 'thread-title',
    'aria-live': 'polite', 'aria-relevant': 'additions',
  });
  el.scroller = h('div', { class: 'scroller', tabindex: '-1' }, el.timeline);
  el.composerInput = h('textarea', {
    id: 'composer-input', rows: '2', 'aria-label': 'Message', placeholder: 'Write a message…',
    onkeydown: (event) => {
      if (event.key === 'Enter' && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        session.sendMessage();
      }
    },
  });
  el.composerSend = h('button', { type: 'submit', class: 'primary', 'aria-label': 'Send the message' }, 'Send');
  el.composerError = h('p', { class: 'error', role: 'alert', hidden: true });
  const composer = h('form', {
    class: 'composer', 'aria-label': 'Write a message',
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
  el.panelHeading = h('h2', { tabindex: '-1', id: 'decisions-title', text: 'Decisions' });
  const panel = h('aside', { id: 'decisions', class: 'panel', 'aria-labelledby': 'decisions-title' },
    h('div', { class: 'drawer-head' },
      el.panelHeading,
      h('button', { type: 'button', class: 'icon-button drawer-close', 'aria-label': 'Close the decisions',
        onclick: () => session.togglePanel() }, '×')),
    h('p', { class: 'help', text: 'Questions waiting for you, from every thread. Answering here works even while Main has a card.' }),
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
