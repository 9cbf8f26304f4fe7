// MaxClaw's service worker (served at /sw.js, scope /). Three jobs:
// 1. Push: show a card's question as a notification whose buttons are its options
//    (recommended first), tagged with the card's collapse id so a withdraw closes it.
// 2. Clicks: a button answers through POST /v1/push/actions with the payload's action token
//    (single use, this decision and this device only). This worker never holds the user's
//    bearer token. A click on the body, or on a secret question, opens the WebUI. "Main
//    answered … for you" has Why? (opens the card's thread) and Revoke (its own revoke token).
// 3. Offline: the app shell is kept in a cache, so with the server unreachable the page
//    still loads and says "Offline — reconnecting" instead of a browser error page.
// The server prepends `const SHELL = [...]` and `const SHELL_VERSION = '…'` (the app's files
// and a hash of them), so a new release installs a new worker and a fresh cache.

/* global SHELL, SHELL_VERSION */
'use strict';

const CACHE = `maxclaw-shell-${SHELL_VERSION}`;
const STATE = 'maxclaw-state'; // small values the page and this worker share
const PAYLOAD_VERSION = 1;
const ICON = '/assets/icon-192.png';
const BADGE = '/assets/badge-72.png';

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
  const payload = readPayload(data);
  // payloads from before versioning have no `v`; they are version 1
  const version = payload ? (payload.v === undefined ? 1 : payload.v) : null;
  if (!payload || version !== PAYLOAD_VERSION) return showUnknown();
  if (payload.kind === 'withdraw') return withdraw(payload.collapse_id);
  if (payload.kind === 'agent-question') return showQuestion(payload);
  if (payload.kind === 'main-answered') return showMainAnswered(payload);
  if (payload.kind === 'test') return showTest(payload);
  return showUnknown();
}

/** A push this worker cannot read: say so plainly (a browser requires something visible). */
function showUnknown() {
  return self.registration.showNotification('MaxClaw', {
    body: 'Something new is waiting. Open MaxClaw to see it.',
    tag: 'maxclaw:unknown', icon: ICON, badge: BADGE, data: { kind: 'unknown' },
  });
}

function showTest(payload) {
  return self.registration.showNotification(String(payload.title || 'MaxClaw'), {
    body: String(payload.body || 'Notifications work on this device.'),
    tag: String(payload.collapse_id || 'maxclaw:test'), icon: ICON, badge: BADGE,
    data: { kind: 'test' },
  });
}

/** The notification's buttons: options as the server ordered them, cut to what fits. */
function notificationActions(payload) {
  if (payload.secret || !payload.action_token) return [];
  const placeholder = payload.reply && payload.reply.placeholder;
  const actions = (Array.isArray(payload.actions) ? payload.actions : []).map((a) => (a.input
    ? { action: String(a.id), title: String(a.title), type: 'text', placeholder }
    : { action: String(a.id), title: String(a.title) }));
  // a text card has no buttons: its reply box is an "other" action, where the platform has one
  if (!actions.length && placeholder) {
    actions.push({ action: 'other', title: 'Reply…', type: 'text', placeholder });
  }
  const max = self.Notification && Notification.maxActions ? Notification.maxActions : 2;
  return actions.slice(0, max);
}

function showQuestion(payload) {
  const data = {
    kind: 'agent-question', decision_id: payload.decision_id,
    component_id: payload.component_id, thread_id: payload.thread_id,
    action_token: payload.secret ? null : payload.action_token || null,
    secret: Boolean(payload.secret), collapse_id: payload.collapse_id,
    title: payload.title, body: payload.body,
  };
  return self.registration.showNotification(String(payload.title || 'MaxClaw'), {
    body: String(payload.body || ''), tag: String(payload.collapse_id || ''), renotify: true,
    icon: ICON, badge: BADGE, actions: notificationActions(payload), data,
    timestamp: Date.now(),
  });
}

/** "Main answered … for you": Why? opens the card's thread, Revoke undoes it (its own token). */
function showMainAnswered(payload) {
  const token = payload.secret ? null : payload.action_token || null;
  const actions = [{ action: 'why', title: 'Why?' }];
  if (token) actions.push({ action: 'revoke', title: 'Revoke' });
  const data = {
    kind: 'main-answered', decision_id: payload.decision_id,
    component_id: payload.component_id, thread_id: payload.thread_id, action_token: token,
    collapse_id: payload.collapse_id,
  };
  return self.registration.showNotification(String(payload.title || 'MaxClaw'), {
    body: String(payload.body || ''), tag: String(payload.collapse_id || ''), renotify: true,
    icon: ICON, badge: BADGE, actions, data, timestamp: Date.now(),
  });
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
  if (data.kind === 'main-answered') {
    if (action !== 'revoke' || !data.action_token) return openApp(data); // Why?, or the body
    return send(data, { action_token: data.action_token, action: 'revoke', text: null });
  }
  if (data.kind !== 'agent-question' || !action || data.secret || !data.action_token) {
    return openApp(data);
  }
  let text = null;
  if (action === 'other') {
    text = typeof reply === 'string' ? reply.trim() : '';
    if (!text) return openApp(data); // no reply box on this platform: answer in the app
  }
  return send(data, { action_token: data.action_token, action, text });
}

/** POST a notification's action with its token; on a refusal, say so in its place. */
async function send(data, action) {
  let response;
  try {
    response = await fetch('/v1/push/actions', {
      method: 'POST', credentials: 'omit', cache: 'no-store',
      headers: { 'Content-Type': 'application/json', Accept: 'application/json' },
      body: JSON.stringify(action),
    });
  } catch {
    return followUp(data, 'Not sent',
      'MaxClaw could not be reached, so the answer was not sent. Tap to answer in the app.');
  }
  if (response.ok) return undefined; // answered: the card and every other device follow
  let body = {};
  try {
    body = await response.json();
  } catch {
    body = {};
  }
  const settledVia = body.data && body.data.settled_via;
  if (body.code === 'withdrawn' || settledVia === 'withdrawn') {
    return followUp(data, 'Withdrawn', 'The agent no longer needs this answer.');
  }
  if (body.code === 'expired' || settledVia === 'expired') {
    return followUp(data, 'Expired', 'This question expired before it was answered.');
  }
  if (body.code === 'settled') {
    return followUp(data, 'Already answered', 'This question was already answered elsewhere.');
  }
  if (response.status === 401) {
    return followUp(data, 'This notification is out of date', 'Tap to answer in MaxClaw.');
  }
  return followUp(data, 'Not sent', `${body.message || `The server answered ${response.status}.`} Tap to answer in MaxClaw.`);
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
    if ('focus' in client) return client.focus();
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
