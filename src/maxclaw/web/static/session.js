// A signed-in session: the layout, REST loading, the live connection and the actions.

import { createApi, describeError } from './api.js';
import { renderComponent, stateOf, toolCallIdOf } from './cards.js';
import { barDecisions, nextSnoozeEnd, renderDecision, renderNudge, SNOOZE_MINUTES } from './decisions.js';
import { h, signature } from './dom.js';
import { buildLayout, KIND_LABELS, threadLabel } from './layout.js';
import { Live } from './live.js';
import { Store } from './store.js';
import { isShown, renderMessage } from './timeline.js';

const PAGE = 500;
const RENDER_DELAY_MS = 16;
const THREAD_ROUTE = /^#\/t\/([0-9a-fA-F-]{36})$/;
const WIDE = '(min-width: 1100px)';

/** A keyed list: rebuild an item only when its signature changes, move nodes only if needed. */
function keyedList(container) {
  const cache = new Map();
  return (items) => {
    const seen = new Set();
    const els = items.map((item) => {
      seen.add(item.key);
      let view = cache.get(item.key);
      if (!view || view.sig !== item.sig) {
        const el = item.build();
        if (view && view.el.isConnected) swap(view.el, el);
        view = { sig: item.sig, el };
        cache.set(item.key, view);
      }
      return view.el;
    });
    for (const key of [...cache.keys()]) if (!seen.has(key)) cache.delete(key);
    let at = container.firstChild;
    for (const el of els) {
      if (el === at) {
        at = at.nextSibling;
      } else {
        container.insertBefore(el, at);
      }
    }
    while (at) {
      const next = at.nextSibling;
      at.remove();
      at = next;
    }
  };
}

/** Replace a view; keyboard focus inside it moves to the new one instead of being lost. */
function swap(oldEl, newEl) {
  const hadFocus = oldEl.contains(document.activeElement);
  oldEl.replaceWith(newEl);
  if (hadFocus) newEl.focus({ preventScroll: true });
}

export class Session {
  constructor(root, token, { signOut }) {
    this.root = root;
    this.token = token;
    this.signOutHook = signOut;
    this.api = createApi(() => token, () => this.signOut('Your token is no longer accepted. Sign in again.'));
    this.store = new Store();
    this.me = null;
    this.threadId = null;
    this.loaded = new Set();
    this.missing = new Set();
    this.uiState = new Map();
    this.overrides = new Map();
    this.componentViews = new Map();
    this.definitions = new Map();
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
    this.cursorKey = `maxclaw.cursor.${this.me.user_id}`;
    this.cursor = sessionStorage.getItem(this.cursorKey);
    this.el = buildLayout(this.root, this);
    this.renderMessages = keyedList(this.el.timeline);
    this.renderThreads = keyedList(this.el.threadList);
    this.renderDecisions = keyedList(this.el.decisionList);
    this.renderBar = keyedList(this.el.nudge);
    this.store.onChange(() => this.scheduleRender());
    await Promise.all([this.loadThreads(), this.loadDecisions()]);
    this.live = new Live(this.token, {
      getCursor: () => this.cursor,
      setCursor: (cursor) => this.setCursor(cursor),
      onRecord: (table, record) => this.store.upsert(table, record),
      onStatus: (status, info) => this.showStatus(status, info),
      onResync: () => this.reloadAll(),
      onRefused: (code) => this.signOut(code === 4403
        ? 'That is an agent token. The WebUI needs a user token (--role user).'
        : 'Your token is no longer accepted. Sign in again.'),
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
    const { decisions } = await this.api.decisions('open');
    for (const decision of decisions) this.store.upsert('decisions', decision);
  }

  async loadMessages(threadId) {
    let after = 0;
    for (;;) {
      const { messages } = await this.api.messages(threadId, after);
      for (const message of messages) this.store.upsert('messages', message);
      if (messages.length < PAGE) break;
      after = messages[messages.length - 1].id;
    }
    this.loaded.add(threadId);
    this.scheduleRender();
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

  render() {
    const scroller = this.el.scroller;
    const nearEnd = scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 120;
    this.renderThreadList();
    this.renderThreadHead();
    this.renderTimeline();
    this.renderPanel();
    this.focusPendingDecision();
    this.renderNudgeBar();
    if (this.jumpToEnd || nearEnd) {
      scroller.scrollTop = scroller.scrollHeight;
      if (this.loaded.has(this.threadId)) this.jumpToEnd = false;
    }
  }

  openCountsByThread() {
    const counts = new Map();
    for (const d of this.store.openDecisions()) {
      counts.set(d.thread_id, (counts.get(d.thread_id) || 0) + 1);
    }
    return counts;
  }

  renderThreadList() {
    const counts = this.openCountsByThread();
    const threads = [...this.store.threads.values()].sort((a, b) => {
      if ((a.kind === 'main') !== (b.kind === 'main')) return a.kind === 'main' ? -1 : 1;
      return String(b.created_at).localeCompare(String(a.created_at));
    });
    this.renderThreads(threads.map((thread) => {
      const active = thread.id === this.threadId;
      const count = counts.get(thread.id) || 0;
      return {
        key: thread.id,
        sig: signature([thread.rev, active, count]),
        build: () => h('li', {},
          h('button', {
            type: 'button', class: `thread-item${active ? ' active' : ''}`,
            'aria-current': active ? 'page' : null, 'data-thread-id': thread.id,
            onclick: () => this.openThread(thread.id),
          },
          h('span', { class: 'thread-title', text: threadLabel(thread) }),
          h('span', { class: 'thread-meta' },
            thread.kind !== 'normal' ? h('span', { class: `kind kind-${thread.kind}`, text: KIND_LABELS[thread.kind] }) : null,
            thread.category ? h('span', { class: 'kind', text: thread.category }) : null,
            thread.turn_state !== 'idle' ? h('span', { class: 'turn', text: thread.turn_state === 'running' ? 'working' : 'queued' }) : null,
            count ? h('span', { class: 'count', 'aria-label': `${count} open questions`, text: String(count) }) : null))),
      };
    }));
  }

  renderThreadHead() {
    const thread = this.store.threads.get(this.threadId);
    const openCount = this.store.openDecisions().length;
    this.el.panelCount.textContent = openCount ? String(openCount) : '';
    this.el.panelToggle.setAttribute('aria-label', `Decisions: ${openCount} open`);
    const title = this.missing.has(this.threadId) ? 'No such thread' : thread ? threadLabel(thread) : 'Loading…';
    document.title = `${openCount ? `(${openCount}) ` : ''}${title} · MaxClaw`;
    this.el.threadTitle.textContent = title;
    const bits = [];
    if (thread && thread.kind !== 'normal') bits.push(KIND_LABELS[thread.kind]);
    if (thread && thread.category) bits.push(thread.category);
    if (thread && thread.turn_state === 'running') bits.push('the agent is working…');
    if (thread && thread.turn_state === 'queued') bits.push('a turn is queued');
    this.el.threadMeta.textContent = bits.join(' · ');
    this.el.composerInput.disabled = !thread;
    this.el.composerSend.disabled = !thread;
  }

  renderTimeline() {
    const threadId = this.threadId;
    if (this.missing.has(threadId)) {
      this.renderMessages([{ key: 'missing', sig: 'missing', build: () => h('li', { class: 'empty', text: 'This thread does not exist, or is not yours.' }) }]);
      return;
    }
    const messages = this.store.messagesOf(threadId).filter(isShown);
    const items = messages.map((message) => ({
      key: message.id,
      sig: signature([message.rev, message.source_meta && message.source_meta.askHandoff ? this.titleOf(message.source_meta.askHandoff.threadId) : 0]),
      build: () => renderMessage(message, this.timelineCtx()),
    }));
    if (!items.length) {
      const text = this.loaded.has(threadId) ? 'No messages yet. Write the first one below.' : 'Loading…';
      items.push({ key: 'empty', sig: text, build: () => h('li', { class: 'empty', text }) });
    }
    this.renderMessages(items);
    // cards whose state changed without their row changing (the tool row moved): update them
    for (const message of messages) {
      if (message.role !== 'assistant' || !message.components) continue;
      for (const def of message.components) this.componentEl(def, message);
    }
  }

  timelineCtx() {
    return {
      threadTitle: (id) => this.titleOf(id),
      openThread: (id) => this.openThread(id),
      componentEl: (def, card, message) => this.componentEl(def, message),
    };
  }

  titleOf(threadId) {
    const thread = this.store.threads.get(threadId);
    return thread ? threadLabel(thread) : 'another thread';
  }

  /** The component's element, rebuilt in place when its state or its UI state changed. */
  componentEl(def, message) {
    const callId = toolCallIdOf(def.id);
    const thread = this.store.threads.get(message.thread_id);
    const state = stateOf(def, this.store.toolRow(message.thread_id, callId), this.overrides.get(def.id));
    const ui = this.ui(def.id);
    const sig = signature([message.rev, state, thread && thread.kind, thread && thread.category,
      ui.busy, ui.error, ui.otherOpen, ui.reasonOpen, ui.reason]);
    let view = this.componentViews.get(def.id);
    if (!view || view.sig !== sig) {
      const card = { callId, title: def.title, stakes: def.stakes,
        defs: message.components.filter((d) => toolCallIdOf(d.id) === callId) };
      const el = renderComponent(def, card, message, thread, state, this.componentCtx());
      if (view && view.el.isConnected) swap(view.el, el);
      view = { sig, el };
      this.componentViews.set(def.id, view);
    }
    return view.el;
  }

  componentCtx() {
    return {
      ui: (key) => this.ui(key),
      setUi: (key, patch) => this.setUi(key, patch),
      answer: (id, selected, text, opts) => this.answer(id, selected, text, opts),
      toMain: (id) => this.act(id, () => this.api.toMain(id)),
      revoke: (id) => this.act(id, () => this.api.revoke(id)),
      why: (id) => this.why(id),
      openPanel: (id) => this.openPanel(id),
    };
  }

  decisionCtx(prefix) {
    return {
      prefix,
      ui: (key) => this.ui(key),
      settle: (decision, selected, text, opts) => this.settle(decision, selected, text, opts),
      snooze: (decision) => this.snooze(decision),
      openThread: (id) => this.openThread(id),
      threadTitle: (id) => this.titleOf(id),
      definition: (componentId) => this.definitionOf(componentId),
    };
  }

  /** A card's definition: from a loaded row, else fetched once (the panel spans threads). */
  definitionOf(componentId) {
    if (!componentId) return null;
    if (this.store.definitions.has(componentId)) return this.store.definitions.get(componentId);
    if (this.definitions.has(componentId)) return this.definitions.get(componentId);
    // a first subscription brings every row; fetch only what is still missing after it
    if (!this.live || !this.live.synced) return null;
    this.definitions.set(componentId, null);
    this.api.component(componentId).then((component) => {
      this.definitions.set(componentId, component);
      this.scheduleRender();
    }, () => setTimeout(() => this.definitions.delete(componentId), 30000));
    return null;
  }

  renderPanel() {
    const open = this.store.openDecisions();
    const items = open.map((decision) => {
      const ui = this.ui(`d${decision.id}`);
      return {
        key: decision.id,
        sig: signature([decision.rev, ui.busy, ui.error, this.titleOf(decision.thread_id), !!this.definitionOf(decision.component_id)]),
        build: () => h('li', {}, renderDecision(decision, this.decisionCtx('panel'))),
      };
    });
    if (!items.length) {
      items.push({ key: 'empty', sig: 'empty', build: () => h('li', { class: 'empty', text: 'Nothing is waiting for you.' }) });
    }
    this.renderDecisions(items);
  }

  renderNudgeBar() {
    const onMain = this.threadId === this.me.main_thread_id;
    const bars = onMain ? [] : barDecisions(this.store.openDecisions());
    this.el.nudge.hidden = bars.length === 0;
    this.renderBar(bars.length ? [{
      key: 'bar',
      sig: signature([bars.map((d) => d.rev), this.ui(`d${bars[0].id}`).busy, this.ui(`d${bars[0].id}`).error]),
      build: () => renderNudge(bars, this.decisionCtx('bar')),
    }] : []);
    clearTimeout(this.snoozeTimer);
    const next = nextSnoozeEnd(this.store.openDecisions());
    if (next !== null) this.snoozeTimer = setTimeout(() => this.scheduleRender(), next - Date.now() + 50);
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
      this.el.conn.textContent = 'Live';
      banner.hidden = true;
      this.scheduleRender();
      if (this.wasOffline) {
        this.wasOffline = false;
        this.toast('Reconnected; caught up on what happened meanwhile.');
        if (!this.loaded.has(this.threadId)) this.ensureThread(this.threadId);
      }
      return;
    }
    if (status === 'connecting') {
      this.el.conn.textContent = 'Connecting…';
      return;
    }
    this.wasOffline = true;
    this.el.conn.textContent = 'Offline';
    banner.hidden = false;
    const tick = () => {
      const seconds = info.retryAt ? Math.max(0, Math.ceil((info.retryAt - Date.now()) / 1000)) : 0;
      this.el.bannerText.textContent = status === 'offline' && seconds > 0
        ? `Offline: the connection to the server was lost. Reconnecting in ${seconds} s…`
        : 'Offline: reconnecting…';
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

  // ---- actions -----------------------------------------------------------------------------

  /** Keep a Component answer until the tool row's upsert (which carries the same) arrives. */
  applyComponent(component) {
    const row = this.store.toolRow(component.thread_id, toolCallIdOf(component.id));
    this.overrides.set(component.id, {
      toolRev: row ? Number(row.rev) : -1,
      state: { status: component.status, answered_by: component.answered_by,
        answered_via: component.answered_via, answer: component.answer, due_at: component.due_at },
    });
    this.scheduleRender();
  }

  async answer(id, selected, text, opts = {}) {
    await this.act(id, async () => {
      const component = await this.api.answer(id, selected, text);
      Object.assign(this.ui(id), { draft: '', checked: [], otherOpen: false });
      if (opts.secret) this.toast('Submitted (not echoed).');
      return component;
    });
  }

  async act(id, call) {
    const ui = this.ui(id);
    if (ui.busy) return;
    this.setUi(id, { busy: true, error: null });
    try {
      this.applyComponent(await call());
    } catch (err) {
      ui.error = describeError(err);
    } finally {
      this.setUi(id, { busy: false });
    }
  }

  async why(id) {
    const ui = this.ui(id);
    if (ui.reasonOpen) {
      this.setUi(id, { reasonOpen: false });
      return;
    }
    this.setUi(id, { reasonOpen: true });
    try {
      const component = await this.api.component(id);
      this.setUi(id, { reason: component.main_reason || '' });
    } catch (err) {
      this.setUi(id, { reasonOpen: false, error: describeError(err) });
    }
  }

  async settle(decision, selected, text, opts = {}) {
    const key = `d${decision.id}`;
    if (this.ui(key).busy) return;
    this.setUi(key, { busy: true, error: null });
    try {
      const settled = await this.api.settle(decision.id, selected, text);
      this.store.upsert('decisions', settled);
      this.ui(key).draft = '';
      this.toast(opts.secret ? 'Submitted (not echoed).' : `Answered: ${decision.title || 'question'}.`);
    } catch (err) {
      this.ui(key).error = describeError(err);
    } finally {
      this.setUi(key, { busy: false });
    }
  }

  async snooze(decision) {
    try {
      this.store.upsert('decisions', await this.api.snooze(decision.id, SNOOZE_MINUTES));
      this.toast(`Main's question is snoozed for ${SNOOZE_MINUTES} minutes.`);
    } catch (err) {
      this.toast(describeError(err));
    }
  }

  /** Show the decisions panel (an overlay on narrow screens) at the decision for `componentId`. */
  openPanel(componentId) {
    if (!window.matchMedia(WIDE).matches) document.body.classList.add('panel-open');
    this.el.panelToggle.setAttribute('aria-expanded', 'true');
    // the decision may still be on its way over the WebSocket: focus it when it arrives
    this.pendingFocus = { componentId, until: Date.now() + 5000 };
    this.render();
    if (this.pendingFocus) this.el.panelHeading.focus();
  }

  focusPendingDecision() {
    const pending = this.pendingFocus;
    if (!pending) return;
    if (Date.now() > pending.until) {
      this.pendingFocus = null;
      return;
    }
    const target = this.el.decisionList.querySelector(
      `[data-component-id="${CSS.escape(pending.componentId)}"]`);
    if (!target) return;
    this.pendingFocus = null;
    target.scrollIntoView({ block: 'nearest' });
    target.focus({ preventScroll: true });
  }

  togglePanel() {
    if (window.matchMedia(WIDE).matches) {
      this.el.panelHeading.focus();
      return;
    }
    const open = document.body.classList.toggle('panel-open');
    this.el.panelToggle.setAttribute('aria-expanded', String(open));
    if (open) this.el.panelHeading.focus();
  }

  toggleNav() {
    const open = document.body.classList.toggle('nav-open');
    this.el.navToggle.setAttribute('aria-expanded', String(open));
  }

  async sendMessage() {
    const body = this.el.composerInput.value;
    if (!body.trim() || !this.threadId) return;
    this.el.composerSend.disabled = true;
    this.setComposerError(null);
    try {
      this.store.upsert('messages', await this.api.postMessage(this.threadId, body));
      this.el.composerInput.value = '';
      this.jumpToEnd = true;
      this.scheduleRender();
    } catch (err) {
      this.setComposerError(describeError(err));
    } finally {
      this.el.composerSend.disabled = false;
    }
  }

  async createThread(title, kind) {
    try {
      const thread = await this.api.createThread(title, kind);
      this.store.upsert('threads', thread);
      this.openThread(thread.id);
      return true;
    } catch (err) {
      this.toast(describeError(err));
      return false;
    }
  }
}

