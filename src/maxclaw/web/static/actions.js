// The session's actions: answering cards and decisions, Main's hand-off controls, the panel,
// the composer. Mixed into Session (session.js); `this` is the session.

import { ApiError, describeError } from './api.js';
import { draftAnswer, toolCallIdOf } from './cards.js';
import { t } from './dom.js';
import { SNOOZE_MINUTES } from './decisions.js';

const WIDE = '(min-width: 1100px)';
// how long an answer given from the panel keeps its "Take back" there (the server's default
// window, MAXCLAW_RETRACT_WINDOW_MINUTES; it refuses with 409 too_late past its own)
const TAKE_BACK_MS = 10 * 60 * 1000;

export const actions = {
  /** Keep a Component answer until the tool row's upsert (which carries the same) arrives. */
  applyComponent(component) {
    const row = this.store.toolRow(component.thread_id, toolCallIdOf(component.id));
    this.overrides.set(component.id, {
      toolRev: row ? Number(row.rev) : -1,
      state: { status: component.status, answered_by: component.answered_by,
        answered_via: component.answered_via, answer: component.answer, due_at: component.due_at,
        answerable_here: component.answerable_here, main_may_take: component.main_may_take,
        withdrawn_reason: component.withdrawn_reason, superseded_by: component.superseded_by,
        seen_at: component.seen_at },
    });
    this.scheduleRender();
  },

  async answer(id, selected, text, opts = {}) {
    await this.act(id, async () => {
      const component = await this.api.answer(id, selected, text);
      Object.assign(this.ui(id), { draft: '', checked: [], otherOpen: false });
      if (opts.secret) this.toast(t('action.not_echoed'));
      return component;
    });
  },

  /**
   * A card with several questions: every drafted one in one request (POST /v1/cards/{id}/
   * answer), which the server writes as one message. A question settled elsewhere meanwhile
   * says so on itself; the others still land.
   */
  async answerCard(card, open) {
    const key = `card:${card.callId}`;
    if (this.ui(key).busy) return;
    const answers = {};
    for (const def of open) {
      const drafted = draftAnswer(def, this.ui(def.id));
      if (drafted) answers[def.id.slice(card.callId.length + 1)] = drafted;
    }
    for (const def of open) if (def.kind === 'secret') this.ui(def.id).secret = '';
    if (!Object.keys(answers).length) {
      this.setUi(key, { error: t('action.at_least_one') });
      return;
    }
    this.setUi(key, { busy: true, error: null });
    try {
      const result = await this.api.answerCard(card.callId, answers);
      for (const [id, got] of Object.entries(result.components || {})) {
        if (got.error) {
          this.setUi(id, { error: describeError(new ApiError(409, got.error.code, got.error.message, got.error.data)) });
        } else {
          Object.assign(this.ui(id), { draft: '', checked: [], picked: [], error: null });
          this.applyComponent(got);
        }
      }
      if (open.some((def) => def.kind === 'secret' && answers[def.id.slice(card.callId.length + 1)])) {
        this.toast(t('action.not_echoed'));
      }
    } catch (err) {
      this.ui(key).error = describeError(err);
    } finally {
      this.setUi(key, { busy: false });
    }
  },

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
  },

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
  },

  async settle(decision, selected, text, opts = {}) {
    const key = `d${decision.id}`;
    if (this.ui(key).busy) return;
    this.setUi(key, { busy: true, error: null });
    try {
      const settled = await this.api.settle(decision.id, selected, text);
      this.keepForTakeBack(decision.id);
      this.store.upsert('decisions', settled);
      this.ui(key).draft = '';
      this.toast(opts.secret ? t('action.not_echoed') : t('action.answered', { title: decision.title || t('action.question') }));
    } catch (err) {
      this.ui(key).error = describeError(err);
    } finally {
      this.setUi(key, { busy: false });
    }
  },

  /** Revoke Main's answer from the panel (the card's revoke); the item is an open question again. */
  async revokeDecision(decision) {
    await this.decisionAction(decision, async () => {
      this.applyComponent(await this.api.revoke(decision.component_id));
      this.store.upsert('decisions', await this.api.decision(decision.id));
      this.toast(t('action.revoked'));
    });
  },

  /** A decision answered from the panel stays there with "Take back" for the retract window. */
  keepForTakeBack(id) {
    this.takeBackable.add(id);
    setTimeout(() => { this.takeBackable.delete(id); this.scheduleRender(); }, TAKE_BACK_MS);
  },

  /** Take back the answer given from the panel: the question is open again (POST …/retract). */
  async retractDecision(decision) {
    await this.decisionAction(decision, async () => {
      this.applyComponent(await this.api.retract(decision.component_id));
      this.takeBackable.delete(decision.id);
      this.store.upsert('decisions', await this.api.decision(decision.id));
      this.toast(t('action.taken_back'));
    });
  },

  /** Stop the thread's running turn (POST …/turn/stop); the agent ends at its next write. */
  async stopTurn(threadId) {
    try {
      await this.api.stopTurn(threadId);
      this.toast(t('action.stopped'));
    } catch (err) {
      this.toast(describeError(err));
    }
  },

  /** Accept Main's answer: the item leaves the panel. */
  async dismiss(decision) {
    await this.decisionAction(decision, async () => {
      this.store.upsert('decisions', await this.api.dismiss(decision.id));
    });
  },

  async decisionAction(decision, call) {
    const key = `d${decision.id}`;
    if (this.ui(key).busy) return;
    this.setUi(key, { busy: true, error: null });
    try {
      await call();
    } catch (err) {
      this.ui(key).error = describeError(err);
    } finally {
      this.setUi(key, { busy: false });
    }
  },

  async snooze(decision) {
    try {
      this.store.upsert('decisions', await this.api.snooze(decision.id, SNOOZE_MINUTES));
      this.toast(t('action.snoozed', { minutes: SNOOZE_MINUTES }));
    } catch (err) {
      this.toast(describeError(err));
    }
  },

  /** Show the decisions panel (an overlay on narrow screens) at the decision for `componentId`. */
  openPanel(componentId) {
    if (!window.matchMedia(WIDE).matches) document.body.classList.add('panel-open');
    this.el.panelToggle.setAttribute('aria-expanded', 'true');
    // the decision may still be on its way over the WebSocket: focus it when it arrives
    this.pendingFocus = { componentId, until: Date.now() + 5000 };
    this.render();
    if (this.pendingFocus) this.el.panelHeading.focus();
  },

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
  },

  togglePanel() {
    if (window.matchMedia(WIDE).matches) {
      this.el.panelHeading.focus();
      return;
    }
    const open = document.body.classList.toggle('panel-open');
    this.el.panelToggle.setAttribute('aria-expanded', String(open));
    if (open) this.el.panelHeading.focus();
  },

  toggleNav() {
    const open = document.body.classList.toggle('nav-open');
    this.el.navToggle.setAttribute('aria-expanded', String(open));
  },

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
  },

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
  },
};
