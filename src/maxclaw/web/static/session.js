// A signed-in session: the layout, REST loading, routing, the live connection and UI state;
// its views (views.js) and actions (actions.js) are mixed into the class.

import { actions } from './actions.js';
import { createApi, describeError } from './api.js';
import { h, t } from './dom.js';
import { buildLayout } from './layout.js';
import { Live } from './live.js';
import { Store } from './store.js';
import { useLocale } from './locale.js';
import { installThreadTools } from './threadtools.js';
import { keyedList, views } from './views.js';

// a thread opens on its newest page; older pages come as Max scrolls up (views.js: the
// sentinel at the top of the timeline)
const OLDER_PAGE = 100;
const RENDER_DELAY_MS = 16;
const THREAD_ROUTE = /^#\/t\/([0-9a-fA-F-]{36})$/;

export class Session {
  constructor(root, token, { signOut, restart }) {
    this.root = root;
    this.token = token;
    this.signOutHook = signOut;
    this.restartHook = restart;
    this.api = createApi(() => token, () => this.signOut(t('signin.token_gone')));
    this.store = new Store();
    this.me = null;
    this.threadId = null;
    this.loaded = new Set();
    // thread id -> the oldest message id of the unbroken run held from the newest one (the
    // timeline shows from there), or null once that run starts the thread
    this.floors = new Map();
    this.olderLoads = new Map(); // thread id -> the page of older messages being fetched
    this.missing = new Set();
    this.uiState = new Map();
    this.overrides = new Map();
    this.componentViews = new Map();
    this.cardFootViews = new Map(); // the one Send of each card with several questions
    this.definitions = new Map();
    this.takeBackable = new Set(); // decisions answered from the panel just now (Take back)
    this.renderQueued = false;
    this.snoozeTimer = null;
    this.offlineTimer = null;
    this.wasOffline = false;
    this.stopped = false;
    this.cursor = null;
  }

  // ---- lifecycle -------------------------------------------------------------------------

  async start() {
    this.me = await this.api.me();
    // his language (the settings row takes it from Accept-Language when it is created)
    await this.loadLocale();
    this.cursorKey = `maxclaw.cursor.${this.me.user_id}`;
    this.cursor = sessionStorage.getItem(this.cursorKey);
    this.el = buildLayout(this.root, this);
    this.renderMessages = keyedList(this.el.timeline);
    this.renderThreads = keyedList(this.el.threadList);
    this.renderDecisions = keyedList(this.el.decisionList);
    this.renderBar = keyedList(this.el.nudge);
    this.threadTools = installThreadTools(this, this.el);
    this.store.onChange(() => this.scheduleRender());
    await Promise.all([this.loadThreads(), this.loadDecisions()]);
    this.live = new Live(this.token, {
      getCursor: () => this.cursor,
      setCursor: (cursor) => this.setCursor(cursor),
      onRecord: (table, record) => this.store.upsert(table, record),
      onStatus: (status, info) => this.showStatus(status, info),
      onResync: () => this.reloadAll(),
      onRefused: (code) => this.signOut(code === 4403 ? t('signin.agent_token') : t('signin.token_gone')),
    });
    this.live.start();
    this.onHash = () => this.route();
    this.onVisibility = () => this.updateFocus();
    this.onOnline = () => this.live.retryNow();
    window.addEventListener('hashchange', this.onHash);
    document.addEventListener('visibilitychange', this.onVisibility);
    window.addEventListener('online', this.onOnline);
    this.route();
  }

  stop() {
    this.stopped = true;
    if (this.live) this.live.stop();
    clearTimeout(this.snoozeTimer);
    clearInterval(this.offlineTimer);
    window.removeEventListener('hashchange', this.onHash);
    document.removeEventListener('visibilitychange', this.onVisibility);
    window.removeEventListener('online', this.onOnline);
  }

  signOut(message) {
    if (this.stopped) return;
    this.stop();
    if (this.cursorKey) sessionStorage.removeItem(this.cursorKey);
    if (location.hash) history.replaceState(null, '', location.pathname);
    this.signOutHook(message);
  }

  async loadLocale() {
    try {
      useLocale((await this.api.settings()).locale);
    } catch {
      // the settings could not be read: the locale this device last used stays
    }
  }

  /** Change his language: kept in his settings (PATCH /v1/settings), then drawn again. */
  async changeLocale(locale) {
    try {
      useLocale((await this.api.patchSettings({ locale })).locale);
    } catch (err) {
      this.toast(describeError(err));
      return;
    }
    this.stop();
    this.restartHook();
  }

  setCursor(cursor) {
    this.cursor = cursor;
    if (cursor) sessionStorage.setItem(this.cursorKey, cursor);
    else sessionStorage.removeItem(this.cursorKey);
  }

  // ---- loading ---------------------------------------------------------------------------

  async loadThreads() {
    const { threads } = await this.api.threads();
    for (const thread of threads) this.store.upsert('threads', thread);
  }

  async loadDecisions() {
    // the panel also keeps Main's answers until Max dismisses them
    const { decisions } = await this.api.decisions('panel');
    for (const decision of decisions) this.store.upsert('decisions', decision);
  }

  /** The thread's newest page; older ones come with loadOlder. */
  async loadMessages(threadId) {
    const held = this.store.messagesOf(threadId);
    const { messages, prev_before_id: prev } = await this.api.messagesBefore(threadId, null, OLDER_PAGE);
    for (const message of messages) this.store.upsert('messages', message);
    const first = messages.length ? messages[0].id : null;
    const floor = prev === null || prev === undefined ? null : first;
    const known = this.floors.get(threadId);
    // the run held before (a thread read earlier, then a resync) still counts when it reaches
    // this page; otherwise the timeline starts at this page and scrolling up fills the rest
    const joined = known !== undefined && held.length && first !== null && held[held.length - 1].id >= first;
    this.floors.set(threadId, joined ? (known === null || floor === null ? null : Math.min(known, floor)) : floor);
    this.loaded.add(threadId);
    this.scheduleRender();
  }

  /** The page before the oldest shown message (the sentinel came into view); one at a time
   * per thread. The render that shows it keeps the viewport on the message that was there. */
  loadOlder(threadId) {
    const floor = this.floors.get(threadId);
    if (floor === null || floor === undefined) return Promise.resolve();
    if (this.olderLoads.has(threadId)) return this.olderLoads.get(threadId);
    const load = (async () => {
      try {
        const { messages, prev_before_id: prev } = await this.api.messagesBefore(threadId, floor, OLDER_PAGE);
        if (threadId === this.threadId) this.keepAnchor = true;
        for (const message of messages) this.store.upsert('messages', message);
        const more = prev !== null && prev !== undefined && messages.length;
        this.floors.set(threadId, more ? messages[0].id : null);
      } catch (err) {
        this.toast(describeError(err));
      } finally {
        this.olderLoads.delete(threadId);
        this.scheduleRender();
      }
    })();
    this.olderLoads.set(threadId, load);
    return load;
  }

  /** Load older pages until `messageId` is shown (a search result jumps to it). */
  async loadBackTo(threadId, messageId) {
    if (!this.loaded.has(threadId)) await this.ensureThread(threadId);
    for (;;) {
      const floor = this.floors.get(threadId);
      if (floor === null || floor === undefined || floor <= messageId) return;
      await this.loadOlder(threadId);
      if (this.floors.get(threadId) === floor) return; // it failed: the toast said why
    }
  }

  async ensureThread(threadId) {
    if (this.loaded.has(threadId) || this.missing.has(threadId)) return;
    try {
      await this.loadMessages(threadId);
    } catch (err) {
      if (err.code === 'not_found') this.missing.add(threadId);
      else this.toast(describeError(err));
      this.scheduleRender();
    }
  }

  /** After a `resync`: everything over REST again (the live link then subscribes afresh). */
  async reloadAll() {
    this.loaded.clear();
    try {
      await Promise.all([this.loadThreads(), this.loadDecisionsAll()]);
      if (this.threadId) await this.loadMessages(this.threadId);
    } catch (err) {
      this.toast(describeError(err));
    }
  }

  async loadDecisionsAll() {
    const { decisions } = await this.api.decisions('all');
    for (const decision of decisions) this.store.upsert('decisions', decision);
  }

  // ---- routing and presence -------------------------------------------------------------

  route() {
    const match = location.hash.match(THREAD_ROUTE);
    const threadId = match ? match[1].toLowerCase() : this.me.main_thread_id;
    if (!match) history.replaceState(null, '', `#/t/${threadId}`);
    if (threadId !== this.threadId) {
      this.threadId = threadId;
      this.jumpToEnd = true;
      this.el.composerInput.value = '';
      this.setComposerError(null);
    }
    document.body.classList.remove('nav-open');
    this.ensureThread(threadId);
    this.updateFocus();
    this.render();
  }

  openThread(threadId) {
    if (!threadId) return;
    location.hash = `#/t/${threadId}`;
  }

  /** Presence: the thread on screen while the page is visible, else none. */
  updateFocus() {
    if (!this.live) return;
    const visible = document.visibilityState === 'visible' && !this.missing.has(this.threadId);
    this.live.setFocus(visible ? this.threadId : null);
  }

  // ---- rendering -------------------------------------------------------------------------

  scheduleRender() {
    if (this.renderQueued || this.stopped) return;
    this.renderQueued = true;
    // a catch-up arrives as many separate frames: one render per burst, not one per frame
    setTimeout(() => {
      this.renderQueued = false;
      if (!this.stopped) this.render();
    }, RENDER_DELAY_MS);
  }

  // ---- UI state ----------------------------------------------------------------------------

  ui(key) {
    if (!this.uiState.has(key)) this.uiState.set(key, {});
    return this.uiState.get(key);
  }

  setUi(key, patch) {
    Object.assign(this.ui(key), patch);
    this.scheduleRender();
  }

  showStatus(status, info) {
    const banner = this.el.banner;
    clearInterval(this.offlineTimer);
    this.el.conn.dataset.state = status;
    if (status === 'online') {
      this.el.conn.textContent = t('session.live');
      banner.hidden = true;
      this.scheduleRender();
      if (this.wasOffline) {
        this.wasOffline = false;
        this.toast(t('session.reconnected'));
        if (!this.loaded.has(this.threadId)) this.ensureThread(this.threadId);
      }
      return;
    }
    if (status === 'connecting') {
      this.el.conn.textContent = t('layout.connecting');
      return;
    }
    this.wasOffline = true;
    this.el.conn.textContent = t('session.offline');
    banner.hidden = false;
    const tick = () => {
      const seconds = info.retryAt ? Math.max(0, Math.ceil((info.retryAt - Date.now()) / 1000)) : 0;
      this.el.bannerText.textContent = status === 'offline' && seconds > 0
        ? t('session.offline_in', { seconds }) : t('layout.offline_reconnecting');
    };
    tick();
    if (status === 'offline') this.offlineTimer = setInterval(tick, 1000);
  }

  toast(text) {
    const item = h('p', { class: 'toast-item', text });
    this.el.toasts.append(item);
    setTimeout(() => item.remove(), 6000);
  }

  setComposerError(text) {
    this.el.composerError.textContent = text || '';
    this.el.composerError.hidden = !text;
  }
}

Object.assign(Session.prototype, views, actions);
