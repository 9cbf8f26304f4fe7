// Web Push on the page side: the service worker's registration, the "Notifications" view
// (enable on this browser, the user's devices with remove, a test notification, a preview of
// how a question looks), and adopting a subscription the worker renewed. The bearer token
// stays on the page; the worker answers with the per-notification action token instead.

import { describeError } from './api.js';
import { formatTime, h, replaceChildren } from './dom.js';

const DEVICE_KEY = 'maxclaw.push.device'; // {id, endpoint} of this browser's registration
const STATE = 'maxclaw-state'; // shared with sw.js

// ---- the service worker ----------------------------------------------------------------------

/** Register /sw.js (push, notification clicks, the offline shell); harmless where unsupported. */
export function registerServiceWorker() {
  if (!('serviceWorker' in navigator)) return;
  navigator.serviceWorker.register('/sw.js', { scope: '/' }).catch(() => {
    // no worker (private mode, an old browser): the app still works, without push or offline
  });
}

export function pushSupported() {
  return 'serviceWorker' in navigator && 'PushManager' in window && 'Notification' in window;
}

function isIos() {
  return /iPad|iPhone|iPod/.test(navigator.userAgent)
    || (navigator.platform === 'MacIntel' && navigator.maxTouchPoints > 1);
}

async function readState(key) {
  if (!('caches' in window)) return null;
  const found = await (await caches.open(STATE)).match(`/__state/${key}`);
  return found ? found.json() : null;
}

async function writeState(key, value) {
  if (!('caches' in window)) return;
  await (await caches.open(STATE)).put(`/__state/${key}`, new Response(JSON.stringify(value),
    { headers: { 'Content-Type': 'application/json' } }));
}

async function deleteState(key) {
  if ('caches' in window) await (await caches.open(STATE)).delete(`/__state/${key}`);
}

function thisDevice() {
  try {
    return JSON.parse(localStorage.getItem(DEVICE_KEY) || 'null');
  } catch {
    return null;
  }
}

function keyBytes(base64url) {
  const base64 = base64url.replace(/-/g, '+').replace(/_/g, '/');
  const raw = atob(base64 + '='.repeat((4 - (base64.length % 4)) % 4));
  return Uint8Array.from(raw, (c) => c.charCodeAt(0));
}

/** POST a PushSubscription's JSON as a `webpush` device; remember it as this browser's. */
async function registerSubscription(api, subscription) {
  const device = await api.registerPushDevice({
    platform: 'webpush', endpoint: subscription.endpoint, keys: subscription.keys,
  });
  localStorage.setItem(DEVICE_KEY, JSON.stringify({ id: device.id, endpoint: subscription.endpoint }));
  return device;
}

async function forgetDevice(api, id) {
  try {
    await api.deletePushDevice(id);
  } catch (err) {
    if (err.code !== 'not_found') throw err;
  }
  const mine = thisDevice();
  if (mine && String(mine.id) === String(id)) localStorage.removeItem(DEVICE_KEY);
}

// ---- when a session starts --------------------------------------------------------------------

/** Hook the page to its worker: open a card the worker asks for, adopt renewed subscriptions. */
export function startPush(session) {
  if (!('serviceWorker' in navigator)) return;
  const onMessage = (event) => {
    const message = event.data || {};
    if (message.type === 'maxclaw:open' && typeof message.url === 'string') {
      const hash = new URL(message.url, location.href).hash;
      if (hash) location.hash = hash;
    } else if (message.type === 'maxclaw:resubscribed') {
      adoptRenewedSubscription(session);
    }
  };
  navigator.serviceWorker.addEventListener('message', onMessage);
  adoptRenewedSubscription(session);
}

/** The worker saw `pushsubscriptionchange` and parked the new subscription: register it here
 * (the page holds the bearer token) and remove the device it replaces. */
export async function adoptRenewedSubscription(session) {
  let pending;
  try {
    pending = await readState('pending-subscription');
  } catch {
    return;
  }
  if (!pending || !pending.subscription) return;
  const previous = thisDevice();
  try {
    const device = await registerSubscription(session.api, pending.subscription);
    if (previous && String(previous.id) !== String(device.id)) {
      await forgetDevice(session.api, previous.id);
    }
    await deleteState('pending-subscription');
    session.toast('Notifications: this browser\'s renewed subscription is registered.');
  } catch (err) {
    session.toast(`Notifications: could not register the renewed subscription. ${describeError(err)}`);
  }
}

// ---- the view ---------------------------------------------------------------------------------

const PLATFORMS = { webpush: 'Browser', apns: 'iPhone / iPad app', webhook: 'Webhook', log: 'Server log' };

export async function openNotifications(session) {
  let dialog = document.getElementById('notifications');
  if (!dialog) {
    dialog = h('dialog', { id: 'notifications', class: 'notifications', 'aria-labelledby': 'notifications-title' });
    dialog.addEventListener('close', () => session.el.notificationsButton?.focus());
    document.body.append(dialog);
  }
  const view = new NotificationsView(session, dialog);
  await view.render();
  if (!dialog.open) dialog.showModal();
  return view;
}

class NotificationsView {
  constructor(session, dialog) {
    this.session = session;
    this.api = session.api;
    this.dialog = dialog;
    this.devices = [];
    this.message = '';
    this.error = '';
    this.busy = false;
  }

  say(message, error) {
    this.message = message || '';
    this.error = error || '';
    return this.render();
  }

  async load() {
    try {
      this.devices = (await this.api.pushDevices()).devices;
    } catch (err) {
      this.error = describeError(err);
    }
  }

  async subscribed() {
    if (!pushSupported()) return null;
    const registration = await navigator.serviceWorker.getRegistration('/');
    return registration ? registration.pushManager.getSubscription() : null;
  }

  async render() {
    await this.load();
    const mine = thisDevice();
    const registered = mine && this.devices.some((d) => String(d.id) === String(mine.id));
    const subscription = await this.subscribed().catch(() => null);
    const on = Boolean(registered && subscription);
    const close = h('button', {
      type: 'button', class: 'icon-button', 'aria-label': 'Close notifications',
      onclick: () => this.dialog.close(),
    }, '×');
    replaceChildren(this.dialog,
      h('div', { class: 'drawer-head' }, h('h2', { id: 'notifications-title', text: 'Notifications' }), close),
      h('p', { class: 'help', text: 'Questions reach your devices as notifications. Their buttons answer the card; tapping the text opens it here.' }),
      h('section', { class: 'push-section', 'aria-labelledby': 'push-this' },
        h('h3', { id: 'push-this', text: 'This browser' }),
        h('p', { class: 'push-state', id: 'push-state', role: 'status', text: this.stateLine(on) }),
        this.browserButtons(on)),
      h('section', { class: 'push-section', 'aria-labelledby': 'push-devices-title' },
        h('h3', { id: 'push-devices-title', text: 'Your devices' }),
        this.deviceList(mine),
        h('button', {
          type: 'button', id: 'push-test', disabled: this.busy || !this.devices.length,
          onclick: () => this.sendTest(),
        }, 'Send a test notification')),
      h('section', { class: 'push-section', 'aria-labelledby': 'push-preview-title' },
        h('h3', { id: 'push-preview-title', text: 'Preview' }),
        h('p', { class: 'help', text: 'How a question arrives (the look varies by system).' }),
        notificationPreview(this.previewDecision())),
      h('p', { class: 'push-message', role: 'status', hidden: !this.message, text: this.message }),
      h('p', { class: 'error', role: 'alert', id: 'push-error', hidden: !this.error, text: this.error }));
  }

  stateLine(on) {
    if (!pushSupported()) {
      return isIos()
        ? 'On iPhone and iPad, notifications need MaxClaw on the Home Screen: Share → Add to Home Screen, then open it from there.'
        : 'This browser cannot receive push notifications.';
    }
    if (Notification.permission === 'denied') {
      return 'Notifications are blocked for this site. Allow them in the browser\'s site settings.';
    }
    return on ? 'On: questions arrive here as notifications.' : 'Off: this browser gets no notifications.';
  }

  browserButtons(on) {
    if (!pushSupported()) return null;
    return on
      ? h('button', { type: 'button', id: 'push-disable', disabled: this.busy, onclick: () => this.disable() },
        'Turn off on this browser')
      : h('button', { type: 'button', class: 'primary', id: 'push-enable', disabled: this.busy,
        onclick: () => this.enable() }, 'Enable on this browser');
  }

  deviceList(mine) {
    if (!this.devices.length) return h('p', { class: 'help', id: 'push-no-devices', text: 'No devices yet.' });
    return h('ul', { class: 'push-devices', id: 'push-devices' }, this.devices.map((device) => {
      const here = mine && String(mine.id) === String(device.id);
      const name = PLATFORMS[device.platform] || device.platform;
      return h('li', { class: 'push-device', dataset: { deviceId: String(device.id) } },
        h('span', { class: 'push-device-name', text: here ? `${name} (this browser)` : name }),
        h('span', { class: 'push-device-meta', text: [device.address, `since ${formatTime(device.created_at)}`].filter(Boolean).join(' · ') }),
        h('button', {
          type: 'button', class: 'danger', disabled: this.busy,
          'aria-label': `Remove ${name}${device.address ? ` ${device.address}` : ''}`,
          onclick: () => this.remove(device, here),
        }, 'Remove'));
    }));
  }

  /** The newest open question, titled as its push is: by its thread. */
  previewDecision() {
    const decision = this.session.store.openDecisions().find((d) => d.kind === 'agent-question');
    if (!decision) return null;
    const thread = this.session.store.threads.get(decision.thread_id);
    return { ...decision, title: (thread && thread.title) || decision.title };
  }

  async run(work) {
    this.busy = true;
    await this.say('', '');
    try {
      await work();
    } catch (err) {
      this.error = describeError(err);
    } finally {
      this.busy = false;
      await this.render();
    }
  }

  enable() {
    return this.run(async () => {
      const { vapid_public_key: key } = await this.api.pushConfig();
      if (!key) {
        this.error = 'This server has no VAPID key (MAXCLAW_VAPID_PRIVATE_KEY), so browsers cannot subscribe.';
        return;
      }
      const permission = await Notification.requestPermission();
      if (permission !== 'granted') {
        this.error = 'Notifications were not allowed. Allow them for this site in the browser\'s settings, then try again.';
        return;
      }
      const registration = await navigator.serviceWorker.ready;
      await writeState('vapid-key', key); // the worker re-subscribes with it if needed
      let subscription;
      try {
        subscription = await registration.pushManager.subscribe({
          userVisibleOnly: true, applicationServerKey: keyBytes(key),
        });
      } catch (err) {
        this.error = `The browser's push service refused to subscribe (${err && err.name ? err.name : 'error'}: ${err && err.message ? err.message : err}). Notifications stay off.`;
        return;
      }
      await registerSubscription(this.api, subscription.toJSON());
      this.message = 'Notifications are on for this browser.';
    });
  }

  disable() {
    return this.run(async () => {
      const subscription = await this.subscribed();
      if (subscription) await subscription.unsubscribe();
      const mine = thisDevice();
      if (mine) await forgetDevice(this.api, mine.id);
      this.message = 'Notifications are off for this browser.';
    });
  }

  remove(device, here) {
    return this.run(async () => {
      if (here) {
        const subscription = await this.subscribed();
        if (subscription) await subscription.unsubscribe();
      }
      await forgetDevice(this.api, device.id);
      this.message = 'Device removed.';
    });
  }

  sendTest() {
    return this.run(async () => {
      const { queued } = await this.api.pushTest();
      this.message = queued
        ? `Test notification sent to ${queued} device${queued === 1 ? '' : 's'}.`
        : 'No device can take a test notification.';
    });
  }
}

/** The WebUI's own rendering of a question notification: title, text, then the buttons in the
 * order the push carries them (recommended first, then "Other…"). */
export function notificationPreview(decision) {
  const sample = decision || {
    title: 'Rename the status field', body: 'Keep the old field for one version?',
    options: [{ id: 'drop', label: 'Remove it now' }, { id: 'keep', label: 'Keep one version', recommended: true }],
    allow_text: true, sensitive: false,
  };
  const options = sample.sensitive ? [] : [...(sample.options || [])]
    .sort((a, b) => Number(Boolean(b.recommended)) - Number(Boolean(a.recommended)));
  const buttons = options.map((o) => o.label);
  if (options.length && sample.allow_text) buttons.push('Other…');
  const reply = sample.sensitive ? 'Opens MaxClaw (secret answers are typed only in the app)'
    : (!options.length && sample.allow_text ? 'Reply…' : null);
  return h('figure', { class: 'notif-preview', 'aria-label': 'Notification preview' },
    h('div', { class: 'notif-head' },
      h('img', { src: '/assets/icon-192.png', alt: '', width: '20', height: '20' }),
      h('span', { text: 'MaxClaw' }), h('span', { class: 'notif-time', text: 'now' })),
    h('div', { class: 'notif-title', text: sample.title || 'MaxClaw' }),
    h('div', { class: 'notif-body', text: sample.body || '' }),
    buttons.length ? h('div', { class: 'notif-actions' }, buttons.map((b) => h('span', { class: 'notif-action', text: b }))) : null,
    reply ? h('div', { class: 'notif-reply', text: reply }) : null);
}
