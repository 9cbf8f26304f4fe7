// The session's views: the thread list, the thread head, the timeline with its cards, the
// decisions panel and Main's nudge bar. Mixed into Session (session.js); `this` is the session.

import { renderCardFoot, renderComponent, stateOf, toolCallIdOf } from './cards.js';
import { barDecisions, nextSnoozeEnd, renderDecision, renderNudge } from './decisions.js';
import { h, signature, t } from './dom.js';
import { backgroundLabel, kindLabel, stateLabel, threadLabel } from './layout.js';
import { syncBadge } from './notifications.js';
import { isShown, renderMessage } from './timeline.js';

// how near the top (px) the sentinel starts loading the page before
const OLDER_MARGIN_PX = 800;

/** A keyed list: rebuild an item only when its signature changes, move nodes only if needed. */
export function keyedList(container) {
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
export function swap(oldEl, newEl) {
  const hadFocus = oldEl.contains(document.activeElement);
  oldEl.replaceWith(newEl);
  if (hadFocus) newEl.focus({ preventScroll: true });
}

export const views = {
  render() {
    const scroller = this.el.scroller;
    const nearEnd = scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 120;
    // older messages are about to go in above: keep the message on screen where it is
    const anchor = this.keepAnchor && !this.jumpToEnd ? this.timelineAnchor() : null;
    this.keepAnchor = false;
    this.renderThreadList();
    this.renderThreadHead();
    if (this.threadTools) this.threadTools.render();
    this.renderTimeline();
    this.renderPanel();
    this.focusPendingDecision();
    this.renderNudgeBar();
    if (anchor) {
      this.restoreAnchor(anchor);
    } else if (this.jumpToEnd || nearEnd) {
      scroller.scrollTop = scroller.scrollHeight;
      if (this.loaded.has(this.threadId)) this.jumpToEnd = false;
    }
  },

  /** The first message row visible in the scroller, and how far below its top it sits. */
  timelineAnchor() {
    const top = this.el.scroller.getBoundingClientRect().top;
    for (const row of this.el.timeline.querySelectorAll(':scope > li[data-message-id]')) {
      const box = row.getBoundingClientRect();
      if (box.bottom > top) return { id: row.dataset.messageId, offset: box.top - top };
    }
    return null;
  },

  /** Scroll so the anchor's row is where it was (whatever the browser's own anchoring did). */
  restoreAnchor(anchor) {
    const row = this.el.timeline.querySelector(`:scope > li[data-message-id="${anchor.id}"]`);
    if (!row) return;
    const top = this.el.scroller.getBoundingClientRect().top;
    this.el.scroller.scrollTop += row.getBoundingClientRect().top - top - anchor.offset;
  },

  /** The sentinel at the top: in view (or near it), it loads the page before. */
  olderSentinel(threadId, floor) {
    if (!this.olderObserver) {
      this.olderObserver = new IntersectionObserver((entries) => {
        for (const entry of entries) {
          if (!entry.target.isConnected) {
            this.olderObserver.unobserve(entry.target);
          } else if (entry.isIntersecting && this.loaded.has(entry.target.dataset.threadId)) {
            this.loadOlder(entry.target.dataset.threadId);
          }
        }
      }, { root: this.el.scroller, rootMargin: `${OLDER_MARGIN_PX}px 0px 0px 0px` });
    }
    const el = h('li', { class: 'older-sentinel', 'data-thread-id': threadId, 'data-before-id': floor,
      role: 'status', text: t('thread.loading_older') });
    // a new element per page: observing it reports at once whether it is still in view
    this.olderObserver.observe(el);
    return el;
  },

  openCountsByThread() {
    const counts = new Map();
    for (const d of this.store.openDecisions()) {
      counts.set(d.thread_id, (counts.get(d.thread_id) || 0) + 1);
    }
    return counts;
  },

  renderThreadList() {
    const counts = this.openCountsByThread();
    // an archived thread leaves the list (it stays reachable by link and search) until a new
    // message brings it back; the one on screen stays listed
    const threads = [...this.store.threads.values()].filter((t) => !t.archived_at || t.id === this.threadId).sort((a, b) => {
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
            thread.kind !== 'normal' ? h('span', { class: `kind kind-${thread.kind}`, text: kindLabel(thread.kind) }) : null,
            thread.category ? h('span', { class: 'kind', text: thread.category }) : null,
            // the server's derived state (turns and cards, not the model's words)
            thread.state && thread.state !== 'idle' ? h('span', {
              class: `thread-state state-${thread.state.replace(/ /g, '-')}`, 'data-state': thread.state,
              title: thread.state === 'running' ? t('thread.turn', { state: ['queued', 'running'].includes(thread.turn_state) ? t(`turn.${thread.turn_state}`) : thread.turn_state }) : null,
              text: stateLabel(thread),
            }) : null,
            count ? h('span', { class: 'count', 'aria-label': t('thread.open_count', { count }), text: String(count) }) : null))),
      };
    }));
  },

  renderThreadHead() {
    const thread = this.store.threads.get(this.threadId);
    const openCount = this.store.openDecisions().length;
    this.el.panelCount.textContent = openCount ? String(openCount) : '';
    this.el.panelToggle.setAttribute('aria-label', t('panel.toggle_label', { count: openCount }));
    const title = this.missing.has(this.threadId) ? t('thread.missing_title') : thread ? threadLabel(thread) : t('common.loading');
    document.title = `${openCount ? `(${openCount}) ` : ''}${t('app.title', { page: title })}`;
    syncBadge(this.store.openDecisions());
    this.el.threadTitle.textContent = title;
    const bits = [];
    if (thread && thread.kind !== 'normal') bits.push(kindLabel(thread.kind));
    if (thread && thread.category) bits.push(thread.category);
    if (thread && thread.turn_state === 'running') bits.push(t('thread.working'));
    if (thread && thread.turn_state === 'queued') bits.push(t('thread.queued'));
    // shown whatever else has the floor: "done" is judged from the runtime's jobs too
    const background = thread ? backgroundLabel(thread) : null;
    if (background) bits.push(background);
    this.el.threadMeta.textContent = bits.join(' · ');
    if (thread && thread.turn_state === 'running') this.el.threadMeta.append(' ', this.stopControl(thread.id));
    this.el.composerInput.disabled = !thread;
    this.el.composerSend.disabled = !thread;
  },

  /** Stop beside "the agent is working…": ends the running turn (its next write is refused). */
  stopControl(threadId) {
    return h('button', {
      type: 'button', class: 'link-button stop-turn', 'aria-label': t('thread.stop_label'),
      onclick: () => this.stopTurn(threadId),
    }, t('thread.stop'));
  },

  renderTimeline() {
    const threadId = this.threadId;
    if (this.missing.has(threadId)) {
      this.renderMessages([{ key: 'missing', sig: 'missing', build: () => h('li', { class: 'empty', text: t('thread.missing') }) }]);
      return;
    }
    // from the oldest message of the run loaded back from the newest (older ones held from
    // elsewhere would show with gaps); the sentinel above loads the page before it
    const floor = this.floors.get(threadId);
    const held = this.store.messagesOf(threadId);
    const messages = (floor ? held.filter((m) => m.id >= floor) : held).filter(isShown);
    const items = messages.map((message) => ({
      key: message.id,
      sig: signature([message.rev, message.source_meta && message.source_meta.askHandoff ? this.titleOf(message.source_meta.askHandoff.threadId) : 0]),
      build: () => renderMessage(message, this.timelineCtx()),
    }));
    if (floor && this.loaded.has(threadId)) {
      items.unshift({ key: 'older', sig: `${threadId}|${floor}`, build: () => this.olderSentinel(threadId, floor) });
    } else if (!items.length) {
      const text = this.loaded.has(threadId) ? t('thread.empty') : t('common.loading');
      items.push({ key: 'empty', sig: text, build: () => h('li', { class: 'empty', text }) });
    }
    this.renderMessages(items);
    // cards whose state changed without their row changing (the tool row moved): update them
    for (const message of messages) {
      if (message.role !== 'assistant' || !message.components) continue;
      for (const def of message.components) this.componentEl(def, message);
      for (const callId of new Set(message.components.map((d) => toolCallIdOf(d.id)))) {
        this.cardFootEl(callId, message);
      }
    }
  },

  timelineCtx() {
    return {
      threadTitle: (id) => this.titleOf(id),
      openThread: (id) => this.openThread(id),
      showComponent: (id) => this.showComponent(id),
      componentEl: (def, card, message) => this.componentEl(def, message),
      cardFootEl: (card, message) => this.cardFootEl(card.callId, message),
    };
  },

  /** Scroll to a card's question in this thread's timeline and move focus to it (loading
   * older pages first when the card is above the ones shown). */
  async showComponent(componentId) {
    const find = () => [...this.el.timeline.querySelectorAll('.component[data-component-id]')]
      .find((node) => node.dataset.componentId === componentId);
    const threadId = this.threadId;
    let el = find();
    while (!el && this.floors.get(threadId) && threadId === this.threadId) {
      const floor = this.floors.get(threadId);
      await this.loadOlder(threadId);
      if (this.floors.get(threadId) === floor) break; // it failed: the toast said why
      this.render();
      el = find();
    }
    if (!el) return;
    el.scrollIntoView({ block: 'center' });
    if (!el.hasAttribute('tabindex')) el.setAttribute('tabindex', '-1');
    el.focus();
  },

  /** Send the card a drafted question belongs to (its Ctrl+Enter). */
  sendCardOf(def) {
    const callId = toolCallIdOf(def.id);
    const row = this.store.messagesOf(this.threadId).find((m) => m.role === 'assistant'
      && (m.components || []).some((d) => d.id === def.id));
    if (!row) return;
    const defs = row.components.filter((d) => toolCallIdOf(d.id) === callId);
    const toolRow = this.store.toolRow(row.thread_id, callId);
    const open = defs.filter((d) => stateOf(d, toolRow, this.overrides.get(d.id)).answerable_here);
    this.answerCard({ callId, title: defs[0].title, stakes: defs[0].stakes, defs }, open);
  },

  /** How many questions the card of this component has (its assistant row's components). */
  cardSize(def) {
    const callId = toolCallIdOf(def.id);
    const row = this.store.messagesOf(this.threadId).find((m) => m.role === 'assistant'
      && (m.components || []).some((d) => d.id === def.id));
    return row ? row.components.filter((d) => toolCallIdOf(d.id) === callId).length : 1;
  },

  titleOf(threadId) {
    const thread = this.store.threads.get(threadId);
    return thread ? threadLabel(thread) : t('thread.another');
  },

  /** The component's element, rebuilt in place when its state or its UI state changed. */
  componentEl(def, message) {
    const callId = toolCallIdOf(def.id);
    const thread = this.store.threads.get(message.thread_id);
    const state = stateOf(def, this.store.toolRow(message.thread_id, callId), this.overrides.get(def.id));
    const ui = this.ui(def.id);
    const sig = signature([message.rev, state, thread && thread.kind, thread && thread.category,
      ui.busy, ui.error, ui.otherOpen, ui.reasonOpen, ui.reason, ui.picked]);
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
  },

  /** The one Send of a card with several questions (null for a one-question card). */
  cardFootEl(callId, message) {
    const defs = message.components.filter((d) => toolCallIdOf(d.id) === callId);
    if (defs.length < 2) return null;
    const toolRow = this.store.toolRow(message.thread_id, callId);
    const states = Object.fromEntries(defs.map((d) => [d.id, stateOf(d, toolRow, this.overrides.get(d.id))]));
    const ui = this.ui(`card:${callId}`);
    const sig = signature([defs.map((d) => states[d.id].answerable_here), ui.busy, ui.error]);
    let view = this.cardFootViews.get(callId);
    if (!view || view.sig !== sig) {
      const card = { callId, title: defs[0].title, stakes: defs[0].stakes, defs };
      const el = renderCardFoot(card, states, ui, this.componentCtx());
      if (view && view.el.isConnected) swap(view.el, el);
      view = { sig, el };
      this.cardFootViews.set(callId, view);
    }
    return view.el;
  },

  componentCtx() {
    return {
      multi: (def) => this.cardSize(def) > 1,
      answerCard: (card, open) => this.answerCard(card, open),
      sendCardOf: (def) => this.sendCardOf(def),
      ui: (key) => this.ui(key),
      setUi: (key, patch) => this.setUi(key, patch),
      answer: (id, selected, text, opts) => this.answer(id, selected, text, opts),
      toMain: (id) => this.act(id, () => this.api.toMain(id)),
      revoke: (id) => this.act(id, () => this.api.revoke(id)),
      retract: (id) => this.act(id, () => this.api.retract(id)),
      why: (id) => this.why(id),
      openPanel: (id) => this.openPanel(id),
    };
  },

  decisionCtx(prefix) {
    return {
      prefix,
      ui: (key) => this.ui(key),
      settle: (decision, selected, text, opts) => this.settle(decision, selected, text, opts),
      snooze: (decision) => this.snooze(decision),
      revoke: (decision) => this.revokeDecision(decision),
      retract: (decision) => this.retractDecision(decision),
      mayTakeBack: (decision) => this.takeBackable.has(decision.id),
      dismiss: (decision) => this.dismiss(decision),
      openThread: (id) => this.openThread(id),
      threadTitle: (id) => this.titleOf(id),
      definition: (componentId) => this.definitionOf(componentId),
    };
  },

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
  },

  renderPanel() {
    const items = this.store.panelDecisions(this.takeBackable).map((decision) => {
      const ui = this.ui(`d${decision.id}`);
      return {
        key: decision.id,
        sig: signature([decision.rev, ui.busy, ui.error, this.titleOf(decision.thread_id), !!this.definitionOf(decision.component_id)]),
        build: () => h('li', {}, renderDecision(decision, this.decisionCtx('panel'))),
      };
    });
    if (!items.length) {
      items.push({ key: 'empty', sig: 'empty', build: () => h('li', { class: 'empty', text: t('panel.empty') }) });
    }
    this.renderDecisions(items);
  },

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
  },
};
