// Web Push on the page side: the service worker's registration, the "Notifications" view
// (enable on this browser, the user's devices with remove, a test notification, a preview of
// how a question looks), and adopting a subscription the worker renewed. The bearer token
// stays on the page; the worker answers with the per-notification action token instead.

import { describeError } from './api.js';
import { formatTime, h, relativeTime, replaceChildren, t } from './dom.js';

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

// ---- the app badge -------------------------------------------------------------------------

let badgeSignature = null;

/** The app badge (Badging API, where the platform has one) shows how many decisions are open;
 * the worker, which keeps it current between visits, is told which ones (their collapse ids). */
export function syncBadge(openDecisions) {
  const ids = openDecisions.map((d) => `ask:${d.component_id}`).sort();
  const sig = ids.join('|');
  if (sig === badgeSignature) return;
  badgeSignature = sig;
  if ('setAppBadge' in navigator) {
    (ids.length ? navigator.setAppBadge(ids.length) : navigator.clearAppBadge()).catch(() => {
      // not installed as an app, or badges are off: nothing to show
    });
  }
  writeState('open-decisions', ids).catch(() => {});
}

/** The worker shows its own notices in his locale: tell it which one. */
export function tellWorkerLocale(locale) {
  writeState('locale', locale).catch(() => {});
}

// ---- when a session starts --------------------------------------------------------------------

/** Hook the page to its worker: open a card the worker asks for, adopt renewed subscriptions. */
let onWorkerMessage = null;

export function startPush(session) {
  if (!('serviceWorker' in navigator)) return;
  // a session started again (a new locale) replaces the previous one's listener
  if (onWorkerMessage) navigator.serviceWorker.removeEventListener('message', onWorkerMessage);
  const onMessage = (event) => {
    const message = event.data || {};
    if (message.type === 'maxclaw:open' && typeof message.url === 'string') {
      const hash = new URL(message.url, location.href).hash;
      if (hash) location.hash = hash;
    } else if (message.type === 'maxclaw:resubscribed') {
      adoptRenewedSubscription(session);
    }
  };
  onWorkerMessage = onMessage;
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
    session.toast(t('notif.renewed'));
  } catch (err) {
    session.toast(t('notif.renew_failed', { error: describeError(err) }));
  }
}

// ---- the view ---------------------------------------------------------------------------------

const PLATFORMS = ['webpush', 'apns', 'webhook', 'log'];

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
      type: 'button', class: 'icon-button', 'aria-label': t('notif.close'),
      onclick: () => this.dialog.close(),
    }, '×');
    replaceChildren(this.dialog,
      h('div', { class: 'drawer-head' }, h('h2', { id: 'notifications-title', text: t('notif.title') }), close),
      h('p', { class: 'help', text: t('notif.help') }),
      h('section', { class: 'push-section', 'aria-labelledby': 'push-this' },
        h('h3', { id: 'push-this', text: t('notif.this_browser') }),
        h('p', { class: 'push-state', id: 'push-state', role: 'status', text: this.stateLine(on) }),
        this.browserButtons(on)),
      h('section', { class: 'push-section', 'aria-labelledby': 'push-devices-title' },
        h('h3', { id: 'push-devices-title', text: t('notif.devices') }),
        this.deviceList(mine),
        h('button', {
          type: 'button', id: 'push-test', disabled: this.busy || !this.devices.length,
          onclick: () => this.sendTest(),
        }, t('notif.send_test'))),
      h('section', { class: 'push-section', 'aria-labelledby': 'push-preview-title' },
        h('h3', { id: 'push-preview-title', text: t('notif.preview') }),
        h('p', { class: 'help', text: t('notif.preview_help') }),
        notificationPreview(this.previewDecision())),
      h('p', { class: 'push-message', role: 'status', hidden: !this.message, text: this.message }),
      h('p', { class: 'error', role: 'alert', id: 'push-error', hidden: !this.error, text: this.error }));
  }

  stateLine(on) {
    if (!pushSupported()) {
      return isIos()
        ? t('notif.ios') : t('notif.unsupported');
    }
    if (Notification.permission === 'denied') {
      return t('notif.blocked');
    }
    return on ? t('notif.on') : t('notif.off');
  }

  browserButtons(on) {
    if (!pushSupported()) return null;
    return on
      ? h('button', { type: 'button', id: 'push-disable', disabled: this.busy, onclick: () => this.disable() },
        t('notif.turn_off'))
      : h('button', { type: 'button', class: 'primary', id: 'push-enable', disabled: this.busy,
        onclick: () => this.enable() }, t('notif.enable'));
  }

  deviceList(mine) {
    if (!this.devices.length) return h('p', { class: 'help', id: 'push-no-devices', text: t('notif.no_devices') });
    return h('ul', { class: 'push-devices', id: 'push-devices' }, this.devices.map((device) => {
      const here = mine && String(mine.id) === String(device.id);
      const name = PLATFORMS.includes(device.platform) ? t(`notif.platform.${device.platform}`) : device.platform;
      return h('li', { class: 'push-device', dataset: { deviceId: String(device.id) } },
        h('span', { class: 'push-device-name', text: here ? t('notif.this_device', { name }) : name }),
        h('span', { class: 'push-device-meta', text: [device.address, t('notif.since', { when: formatTime(device.created_at) })].filter(Boolean).join(' · ') }),
        h('button', {
          type: 'button', class: 'danger', disabled: this.busy,
          'aria-label': t('notif.remove_label', { name: device.address ? `${name} ${device.address}` : name }),
          onclick: () => this.remove(device, here),
        }, t('notif.remove')));
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
        this.error = t('notif.no_vapid');
        return;
      }
      const permission = await Notification.requestPermission();
      if (permission !== 'granted') {
        this.error = t('notif.not_allowed');
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
        this.error = t('notif.refused', { error: `${err && err.name ? err.name : 'Error'}: ${err && err.message ? err.message : err}` });
        return;
      }
      await registerSubscription(this.api, subscription.toJSON());
      this.message = t('notif.now_on');
    });
  }

  disable() {
    return this.run(async () => {
      const subscription = await this.subscribed();
      if (subscription) await subscription.unsubscribe();
      const mine = thisDevice();
      if (mine) await forgetDevice(this.api, mine.id);
      this.message = t('notif.now_off');
    });
  }

  remove(device, here) {
    return this.run(async () => {
      if (here) {
        const subscription = await this.subscribed();
        if (subscription) await subscription.unsubscribe();
      }
      await forgetDevice(this.api, device.id);
      this.message = t('notif.removed');
    });
  }

  sendTest() {
    return this.run(async () => {
      const { queued } = await this.api.pushTest();
      this.message = queued ? t('notif.test_sent', { count: queued }) : t('notif.test_none');
    });
  }
}

/** The WebUI's own rendering of a question notification: title, text, then the buttons as the
 * service worker shows them (sw.js): recommended first, then "Other…"; when they do not all fit
 * (`Notification.maxActions`), the recommended one and "Other…" or "Open". */
export function notificationPreview(decision) {
  const sample = decision || {
    title: t('notif.sample_title'), body: t('notif.sample_body'),
    options: [{ id: 'drop', label: t('notif.sample_drop') }, { id: 'keep', label: t('notif.sample_keep'), recommended: true }],
    allow_text: true, sensitive: false,
  };
  const options = sample.sensitive ? [] : [...(sample.options || [])]
    .sort((a, b) => Number(Boolean(b.recommended)) - Number(Boolean(a.recommended)));
  let buttons = options.map((o) => o.label);
  if (options.length && sample.allow_text) buttons.push(t('card.other'));
  const max = 'Notification' in window && Notification.maxActions ? Notification.maxActions : 2;
  if (buttons.length > max) {
    const recommended = options.find((o) => o.recommended);
    buttons = [...(recommended ? [recommended.label] : []),
      sample.allow_text ? t('card.other') : t('push.open')].slice(0, Math.max(1, max));
  }
  const reply = sample.sensitive ? t('notif.secret_opens')
    : (!options.length && sample.allow_text ? t('card.reply') : null);
  return h('figure', { class: 'notif-preview', 'aria-label': t('notif.preview_label') },
    h('div', { class: 'notif-head' },
      h('img', { src: '/assets/icon-192.png', alt: '', width: '20', height: '20' }),
      h('span', { text: t('app.brand') }), h('span', { class: 'notif-time', text: relativeTime(new Date().toISOString()) })),
    h('div', { class: 'notif-title', text: sample.title || t('app.brand') }),
    h('div', { class: 'notif-body', text: sample.body || '' }),
    buttons.length ? h('div', { class: 'notif-actions' }, buttons.map((b) => h('span', { class: 'notif-action', text: b }))) : null,
    reply ? h('div', { class: 'notif-reply', text: reply }) : null);
}
