// The session's views: the thread list, the thread head, the timeline with its cards, the
// decisions panel and Main's nudge bar. Mixed into Session (session.js); `this` is the session.

import { renderCardFoot, renderComponent, stateOf, toolCallIdOf } from './cards.js';
import { barDecisions, nextSnoozeEnd, renderDecision, renderNudge } from './decisions.js';
import { h, signature } from './dom.js';
import { KIND_LABELS, threadLabel } from './layout.js';
import { isShown, renderMessage } from './timeline.js';

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
            // the server's derived state (turns and cards, not the model's words)
            thread.state && thread.state !== 'idle' ? h('span', {
              class: `thread-state state-${thread.state.replace(/ /g, '-')}`, 'data-state': thread.state,
              title: thread.state === 'running' ? `turn ${thread.turn_state}` : null,
              text: thread.state === 'waiting for you' ? `waiting for you (${thread.open_cards})` : thread.state,
            }) : null,
            count ? h('span', { class: 'count', 'aria-label': `${count} open questions`, text: String(count) }) : null))),
      };
    }));
  },

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
  },

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

  /** Scroll to a card's question in this thread's timeline and move focus to it. */
  showComponent(componentId) {
    const el = [...this.el.timeline.querySelectorAll('.component[data-component-id]')]
      .find((node) => node.dataset.componentId === componentId);
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
    return thread ? threadLabel(thread) : 'another thread';
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
    const items = this.store.panelDecisions().map((decision) => {
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
