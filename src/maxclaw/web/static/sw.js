// MaxClaw's service worker (served at /sw.js, scope /). Three jobs:
// 1. Push: show a card's question as a notification whose buttons are its options
//    (recommended first), tagged with the card's collapse id so a withdraw closes it.
// 2. Clicks: a button answers through POST /v1/push/actions with the payload's action token
//    (single use, this decision and this device only). This worker never holds the user's
//    bearer token. A click on the body, or on a secret question, opens the WebUI. "Main
//    answered … for you" has Why? (opens the card's thread) and Revoke (its own revoke token).
//    An answer sent from a button is confirmed by a notification of its own with "Take back"
//    (the answer's response carries its single-use retract token, `take_back`), tagged apart
//    from the question so the answer's withdraw push does not close it.
// 3. Offline: the app shell is kept in a cache, so with the server unreachable the page
//    still loads and says "Offline — reconnecting" instead of a browser error page.
// The server prepends `const SHELL = [...]` and `const SHELL_VERSION = '…'` (the app's files
// and a hash of them), so a new release installs a new worker and a fresh cache.

/* global SHELL, SHELL_VERSION, MaxClawI18n */
'use strict';

// the words it shows come from the WebUI's catalogue (i18n.js), in the locale the push names
// (the server's `locale`) or, for a notice of its own, the one the page last told it
importScripts('/assets/messages-en.js', '/assets/messages-zh-CN.js', '/assets/i18n.js');
const t = (key, params) => MaxClawI18n.t(key, params);

const CACHE = `maxclaw-shell-${SHELL_VERSION}`;
const STATE = 'maxclaw-state'; // small values the page and this worker share
const PAYLOAD_VERSION = 1;
const ICON = '/assets/icon-192.png';
const BADGE = '/assets/badge-72.png';
// the confirmation of an answer sent from a notification, and its one button

// ---- install, activate, offline shell ------------------------------------------------------

self.addEventListener('install', (event) => {
  event.waitUntil((async () => {
    const cache = await caches.open(CACHE);
    await cache.addAll(SHELL.map((url) => new Request(url, { cache: 'no-cache' })));
    await self.skipWaiting();
  })());
});

self.addEventListener('activate', (event) => {
  event.waitUntil((async () => {
    for (const name of await caches.keys()) {
      if (name.startsWith('maxclaw-shell-') && name !== CACHE) await caches.delete(name);
    }
    await self.clients.claim();
  })());
});

self.addEventListener('fetch', (event) => {
  const request = event.request;
  if (request.method !== 'GET') return;
  const url = new URL(request.url);
  if (url.origin !== self.location.origin) return;
  // the API and the WebSocket always go to the network; only the shell is cached
  if (url.pathname !== '/' && !url.pathname.startsWith('/assets/')) return;
  event.respondWith(networkFirst(request, url));
});

async function networkFirst(request, url) {
  const cache = await caches.open(CACHE);
  try {
    const response = await fetch(request);
    if (response.ok) cache.put(url.pathname, response.clone());
    return response;
  } catch (err) {
    const cached = await cache.match(url.pathname);
    if (cached) return cached;
    throw err;
  }
}

// ---- push ----------------------------------------------------------------------------------

self.addEventListener('push', (event) => {
  event.waitUntil(onPush(event.data));
});

function readPayload(data) {
  if (!data) return null;
  try {
    const payload = data.json();
    return payload && typeof payload === 'object' ? payload : null;
  } catch {
    return null;
  }
}

async function onPush(data) {
  await closeLapsedConfirmations();
  const payload = readPayload(data);
  MaxClawI18n.setLocale((payload && payload.locale) || (await readState('locale').catch(() => null)));
  // payloads from before versioning have no `v`; they are version 1
  const version = payload ? (payload.v === undefined ? 1 : payload.v) : null;
  if (!payload || version !== PAYLOAD_VERSION) return showUnknown();
  if (payload.kind === 'withdraw') {
    await countOpen(payload.collapse_id, false);
    return withdraw(payload.collapse_id);
  }
  if (payload.kind === 'agent-question') {
    await countOpen(payload.collapse_id, true);
    return showQuestion(payload);
  }
  if (payload.kind === 'main-answered') {
    await countOpen(payload.collapse_id, false);
    return showMainAnswered(payload);
  }
  if (payload.kind === 'test') return showTest(payload);
  return showUnknown();
}

/** A notification cannot change on its own: whenever this worker wakes for a push, it closes
 * the "Answer sent" confirmations whose Take back window has closed (a tap on one that is
 * still shown hears "Too late to take back" from the server). */
async function closeLapsedConfirmations() {
  const now = Date.now();
  for (const notification of await self.registration.getNotifications()) {
    const data = notification.data || {};
    if (data.kind === 'answer-sent' && data.until && Date.parse(data.until) <= now) {
      notification.close();
    }
  }
}

/** A push this worker cannot read: say so plainly (a browser requires something visible). */
function showUnknown() {
  return self.registration.showNotification(t('push.fallback_title'), {
    body: t('sw.unknown'),
    tag: 'maxclaw:unknown', icon: ICON, badge: BADGE, data: { kind: 'unknown' },
  });
}

function showTest(payload) {
  return self.registration.showNotification(String(payload.title || t('push.fallback_title')), {
    body: String(payload.body || t('sw.test_body')),
    tag: String(payload.collapse_id || 'maxclaw:test'), icon: ICON, badge: BADGE,
    data: { kind: 'test' },
  });
}

/** The notification's buttons (issue 29, item 3). The options as the server ordered them
 * (recommended first) when they all fit (`Notification.maxActions`, 2 on Chromium); else the
 * recommended option, if any, then "Other…" (a reply box, where the card takes words) or
 * "Open": never a silently shortened list. A multi-select question cannot be answered by one
 * tap: it gets "Open" only, which opens the card. */
function notificationActions(payload) {
  if (payload.secret || !payload.action_token) return [];
  const labels = payload.labels || {};
  const open = { action: 'open', title: String(labels.open || t('push.open')) };
  if (payload.multiple) return [open];
  const placeholder = payload.reply && payload.reply.placeholder;
  const all = Array.isArray(payload.actions) ? payload.actions : [];
  const actions = all.map((a) => (a.input
    ? { action: String(a.id), title: String(a.title), type: 'text', placeholder }
    : { action: String(a.id), title: String(a.title) }));
  // a text card has no buttons: its reply box is an "other" action, where the platform has one
  if (!actions.length && placeholder) {
    actions.push({ action: 'other', title: String(labels.reply || t('push.reply')), type: 'text', placeholder });
  }
  const max = self.Notification && Notification.maxActions ? Notification.maxActions : 2;
  if (actions.length <= max) return actions;
  const fitted = [];
  const recommended = all.find((a) => a.recommended);
  if (recommended) fitted.push(actions[all.indexOf(recommended)]);
  const other = actions.find((a) => a.action === 'other');
  fitted.push(other || open);
  return fitted.slice(0, Math.max(1, max));
}

function showQuestion(payload) {
  const data = {
    kind: 'agent-question', decision_id: payload.decision_id,
    component_id: payload.component_id, thread_id: payload.thread_id,
    action_token: payload.secret ? null : payload.action_token || null,
    secret: Boolean(payload.secret), collapse_id: payload.collapse_id,
    title: payload.title, body: payload.body, locale: payload.locale || null,
    // every option's title, shown or not: the confirmation names the one answered, also when
    // the platform tapped an option the fitted buttons left out (a lock screen with more room)
    titles: Object.fromEntries((Array.isArray(payload.actions) ? payload.actions : [])
      .map((a) => [String(a.id), String(a.title)])),
  };
  return self.registration.showNotification(String(payload.title || t('push.fallback_title')), {
    body: String(payload.body || ''), tag: String(payload.collapse_id || ''),
    // quiet hours (payload.silent, issue 29): no sound, no vibration, no re-alert
    renotify: !payload.silent, silent: Boolean(payload.silent),
    icon: ICON, badge: BADGE, actions: notificationActions(payload), data,
    timestamp: Date.now(),
  });
}

/** "Main answered … for you": Why? opens the card's thread, Revoke undoes it (its own token). */
function showMainAnswered(payload) {
  const token = payload.secret ? null : payload.action_token || null;
  const titles = Object.fromEntries((Array.isArray(payload.actions) ? payload.actions : [])
    .map((a) => [a.id, a.title]));
  const actions = [{ action: 'why', title: String(titles.why || t('push.why')) }];
  if (token) actions.push({ action: 'revoke', title: String(titles.revoke || t('push.revoke')) });
  const data = {
    kind: 'main-answered', decision_id: payload.decision_id,
    component_id: payload.component_id, thread_id: payload.thread_id, action_token: token,
    collapse_id: payload.collapse_id, locale: payload.locale || null,
  };
  return self.registration.showNotification(String(payload.title || t('push.fallback_title')), {
    body: String(payload.body || ''), tag: String(payload.collapse_id || ''),
    renotify: !payload.silent, silent: Boolean(payload.silent),
    icon: ICON, badge: BADGE, actions, data, timestamp: Date.now(),
  });
}

// ---- the app badge (Badging API): how many decisions are open -----------------------------
// The page writes the collapse ids of the open decisions to the shared state whenever they
// change (notifications.js); this worker adds a question it shows and drops one that is
// withdrawn, answered by Main, or answered from a notification, and sets the badge from it.

async function countOpen(collapseId, open) {
  if (!collapseId) return;
  const ids = new Set((await readState('open-decisions').catch(() => null)) || []);
  if (open) ids.add(String(collapseId));
  else ids.delete(String(collapseId));
  await writeState('open-decisions', [...ids]);
  if (!('setAppBadge' in self.navigator)) return;
  try {
    if (ids.size) await self.navigator.setAppBadge(ids.size);
    else await self.navigator.clearAppBadge();
  } catch {
    // badges are off or the app is not installed: nothing to show
  }
}

async function withdraw(collapseId) {
  if (!collapseId) return;
  const shown = await self.registration.getNotifications({ tag: String(collapseId) });
  for (const notification of shown) notification.close();
}

// ---- clicks --------------------------------------------------------------------------------

self.addEventListener('notificationclick', (event) => {
  event.notification.close();
  event.waitUntil(onClick(event.notification, event.action, event.reply));
});

async function onClick(notification, action, reply) {
  const data = notification.data || {};
  MaxClawI18n.setLocale(data.locale || (await readState('locale').catch(() => null)));
  if (data.kind === 'answer-sent') {
    if (action !== 'retract' || !data.action_token) return openApp(data); // the body
    return send(data, { action_token: data.action_token, action: 'retract', text: null });
  }
  if (data.kind === 'main-answered') {
    if (action !== 'revoke' || !data.action_token) return openApp(data); // Why?, or the body
    return send(data, { action_token: data.action_token, action: 'revoke', text: null });
  }
  if (data.kind !== 'agent-question' || !action || action === 'open' || data.secret
      || !data.action_token) {
    return openApp(data);
  }
  let text = null;
  if (action === 'other') {
    text = typeof reply === 'string' ? reply.trim() : '';
    if (!text) return openApp(data); // no reply box on this platform: answer in the app
  }
  const answered = text !== null ? text : actionTitle(notification, action);
  return send(data, { action_token: data.action_token, action, text }, answered);
}

function actionTitle(notification, action) {
  const found = (notification.actions || []).find((a) => a.action === action);
  if (found) return found.title;
  const titles = (notification.data && notification.data.titles) || {};
  return typeof titles[action] === 'string' ? titles[action] : '';
}

/** POST a notification's action with its token; on a refusal, say so in its place. An answer
 * (`answered`: the button's title or the reply's text) is confirmed with "Take back". */
async function send(data, action, answered = null) {
  let response;
  try {
    response = await fetch('/v1/push/actions', {
      method: 'POST', credentials: 'omit', cache: 'no-store',
      headers: { 'Content-Type': 'application/json', Accept: 'application/json' },
      body: JSON.stringify(action),
    });
  } catch {
    return followUp(data, t('sw.not_sent'), t('sw.unreachable'));
  }
  let body = {};
  try {
    body = await response.json();
  } catch {
    body = {};
  }
  // answered: the card and every other device follow; this one confirms it, with Take back
  if (response.ok) {
    if (answered === null) return undefined;
    await countOpen(data.collapse_id, false); // one open decision fewer (the app badge)
    return confirmAnswer(data, body, answered);
  }
  if (body.code === 'too_late') return followUp(data, t('sw.too_late'), t('sw.too_late_body'));
  if (body.code === 'seen') return followUp(data, t('sw.too_late'), t('sw.seen_body'));
  const settledVia = body.data && body.data.settled_via;
  if (body.code === 'withdrawn' || settledVia === 'withdrawn') {
    return followUp(data, t('sw.withdrawn'), t('sw.withdrawn_body'));
  }
  if (body.code === 'expired' || settledVia === 'expired') {
    return followUp(data, t('sw.expired'), t('sw.expired_body'));
  }
  if (body.code === 'settled') {
    return followUp(data, t('sw.settled'), t('sw.settled_body'));
  }
  if (response.status === 401) {
    return followUp(data, t('sw.stale'), t('sw.tap_to_answer'));
  }
  // the server's sentence is the contract's English: an English reader gets it, others ours
  const reason = body.message && MaxClawI18n.locale() === 'en' ? body.message
    : t('error.status', { status: response.status });
  return followUp(data, t('sw.not_sent'), t('sw.refused_body', { reason }));
}

/** "Answer sent", with Take back while the server offers it (never for a secret question:
 * it has no token, so it never comes here). Its own tag: the answer's withdraw push, which
 * names the question's, leaves it alone; a Take back brings the question back in its place. */
function confirmAnswer(data, decision, answered) {
  const takeBack = decision && decision.take_back;
  if (!takeBack || !takeBack.action_token || data.secret) return undefined;
  const tag = `sent:${data.component_id || data.decision_id}`;
  return self.registration.showNotification(t('sw.answer_sent'), {
    body: t('sw.you_answered', { answer: String(answered || '').slice(0, 200) }), tag,
    icon: ICON, badge: BADGE, silent: true,
    actions: [{ action: 'retract', title: t('sw.take_back') }],
    data: {
      kind: 'answer-sent', decision_id: data.decision_id, component_id: data.component_id,
      thread_id: data.thread_id, action_token: takeBack.action_token,
      until: takeBack.until || null, collapse_id: tag, locale: data.locale || null,
    },
    timestamp: Date.now(),
  });
}

/** Replace the question's notification with a note; tapping it opens the card's thread. */
function followUp(data, title, body) {
  return self.registration.showNotification(title, {
    body, tag: String(data.collapse_id || 'maxclaw:notice'), icon: ICON, badge: BADGE,
    data: { kind: 'notice', thread_id: data.thread_id || null },
  });
}

async function openApp(data) {
  const url = data && data.thread_id ? `/#/t/${data.thread_id}` : '/';
  const windows = await self.clients.matchAll({ type: 'window', includeUncontrolled: true });
  for (const client of windows) {
    if (new URL(client.url).origin !== self.location.origin) continue;
    client.postMessage({ type: 'maxclaw:open', url });
    // focus() is refused (InvalidAccessError) outside a click's window-interaction grace,
    // e.g. on a slow device; the page has the message and opens the thread either way
    if ('focus' in client) return client.focus().catch(() => undefined);
    return undefined;
  }
  return self.clients.openWindow(url);
}

// ---- a subscription the push service replaced --------------------------------------------
// This worker holds no bearer token, so it cannot register the new subscription itself: it
// keeps it in the shared state cache and tells open pages, which register it (and remove the
// old device); with no page open, the next start of the WebUI does.

self.addEventListener('pushsubscriptionchange', (event) => {
  event.waitUntil(onSubscriptionChange(event.oldSubscription || null, event.newSubscription || null));
});

async function readState(key) {
  const cache = await caches.open(STATE);
  const found = await cache.match(`/__state/${key}`);
  return found ? found.json() : null;
}

async function writeState(key, value) {
  const cache = await caches.open(STATE);
  await cache.put(`/__state/${key}`, new Response(JSON.stringify(value),
    { headers: { 'Content-Type': 'application/json' } }));
}

async function onSubscriptionChange(oldSubscription, newSubscription) {
  let subscription = newSubscription;
  if (!subscription) {
    const options = oldSubscription && oldSubscription.options;
    const key = (options && options.applicationServerKey) || (await readState('vapid-key'));
    if (!key) return;
    subscription = await self.registration.pushManager.subscribe({
      userVisibleOnly: true, applicationServerKey: key,
    });
  }
  await writeState('pending-subscription', {
    subscription: subscription.toJSON(),
    old_endpoint: oldSubscription ? oldSubscription.endpoint : null,
  });
  const windows = await self.clients.matchAll({ type: 'window', includeUncontrolled: true });
  for (const client of windows) client.postMessage({ type: 'maxclaw:resubscribed' });
}
