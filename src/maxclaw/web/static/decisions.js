// The decisions panel (open decisions, answered from here via /settle) and Main's nudge bar
// (open decisions with bar = true, on every page but the Main thread, with snooze).

import { renderObject } from './cards.js';
import { formatTime, h, relativeTime, t } from './dom.js';

export const SNOOZE_MINUTES = 60;

/** Open decisions for the bar: bar = true and not snoozed right now. */
export function barDecisions(decisions, now = Date.now()) {
  return decisions.filter((d) => d.status === 'open' && d.bar
    && !(d.bar_snoozed_until && Date.parse(d.bar_snoozed_until) > now));
}

/** When the next snooze ends (ms since epoch), to show the bar again; null if none. */
export function nextSnoozeEnd(decisions, now = Date.now()) {
  let next = null;
  for (const d of decisions) {
    if (d.status !== 'open' || !d.bar || !d.bar_snoozed_until) continue;
    const until = Date.parse(d.bar_snoozed_until);
    if (until > now && (next === null || until < next)) next = until;
  }
  return next;
}

/**
 * One decision with its answer controls. ctx: {ui(key), settle(decision, selected, text, opts),
 * openThread(id), threadTitle(id), definition(componentId)}.
 */
export function renderDecision(decision, ctx, { compact = false } = {}) {
  const key = `d${decision.id}`;
  const ui = ctx.ui(key);
  if (decision.status === 'settled' && decision.answered_by_main && !compact) {
    return renderMainAnswered(decision, ctx, ui);
  }
  if (decision.status === 'settled' && !decision.answered_by_main && ctx.mayTakeBack
      && ctx.mayTakeBack(decision) && !compact) {
    return renderTakeBack(decision, ctx, ui);
  }
  const enabled = decision.status === 'open' && !ui.busy;
  const headingId = `${ctx.prefix}-decision-${decision.id}`;
  const el = h('article', {
    class: `decision${compact ? ' compact' : ''}`, tabindex: '-1', 'aria-labelledby': headingId,
    'data-decision-id': decision.id, 'data-component-id': decision.component_id,
  });
  const where = decision.thread_id ? ctx.threadTitle(decision.thread_id) : '';
  if (compact) {
    el.append(h('p', { class: 'question', id: headingId },
      h('span', { class: 'card-title', text: t('decision.title_colon', { title: decision.title || t('decision.question') }) }), decision.body));
  } else {
    el.append(h('header', { class: 'decision-head' },
      h('h3', { id: headingId, text: decision.title || t('decision.question') }),
      decision.thread_id ? h('button', {
        type: 'button', class: 'link-button thread-link', onclick: () => ctx.openThread(decision.thread_id),
        'aria-label': t('decision.open_thread', { title: where }),
      }, where) : null));
    el.append(h('p', { class: 'question', text: decision.body }));
  }
  const def = ctx.definition(decision.component_id);
  if (def && def.kind === 'object' && !compact) {
    // an object card's actions only make sense next to the object itself
    el.append(h('details', { class: 'object-preview' },
      h('summary', { text: def.object && def.object.type === 'diff' ? t('decision.show_diff') : t('decision.show_object') }),
      renderObject(def.object)));
  }
  if (def && def.multiple) el.append(multipleForm(decision, def, enabled, ctx));
  else if (decision.options && decision.options.length) el.append(optionButtons(decision, enabled, ctx));
  // the bar stays one line: a written reply belongs in the panel or the Main thread
  if (decision.allow_text && !compact) el.append(textForm(decision, enabled, ui, ctx));
  if (!compact) {
    el.append(h('p', { class: 'meta' }, h('time', { datetime: decision.created_at, title: formatTime(decision.created_at),
      text: t('decision.asked', { when: relativeTime(decision.created_at) }) })));
  }
  if (ui.error) el.append(h('p', { class: 'error', role: 'alert', text: ui.error }));
  return el;
}

/** An answer Main gave for Max: it stays until he revokes it or dismisses it. */
function renderMainAnswered(decision, ctx, ui) {
  const headingId = `${ctx.prefix}-decision-${decision.id}`;
  const where = decision.thread_id ? ctx.threadTitle(decision.thread_id) : '';
  const el = h('article', {
    class: 'decision main-answered', tabindex: '-1', 'aria-labelledby': headingId,
    'data-decision-id': decision.id, 'data-component-id': decision.component_id,
  });
  el.append(h('header', { class: 'decision-head' },
    h('h3', { id: headingId, text: decision.title || t('decision.question') }),
    decision.thread_id ? h('button', {
      type: 'button', class: 'link-button thread-link', onclick: () => ctx.openThread(decision.thread_id),
      'aria-label': t('decision.open_thread', { title: where }),
    }, where) : null));
  el.append(h('p', { class: 'question', text: decision.body }));
  el.append(h('p', { class: 'answered-by-main' },
    h('strong', { text: t('decision.by_main') }), decision.answer_text || ''));
  el.append(h('div', { class: 'controls', role: 'group', 'aria-label': t('decision.main_answer_label', { question: decision.body }) },
    h('button', {
      type: 'button', class: 'option', disabled: !!ui.busy, onclick: () => ctx.revoke(decision),
      'aria-label': t('decision.revoke_label', { question: decision.body }),
    }, t('card.revoke')),
    h('button', {
      type: 'button', class: 'link-button', disabled: !!ui.busy, onclick: () => ctx.dismiss(decision),
      'aria-label': t('decision.dismiss_label', { question: decision.body }),
    }, t('decision.dismiss'))));
  if (decision.settled_at) {
    el.append(h('p', { class: 'meta' }, h('time', { datetime: decision.settled_at, title: formatTime(decision.settled_at),
      text: t('decision.answered_at', { when: relativeTime(decision.settled_at) }) })));
  }
  if (ui.error) el.append(h('p', { class: 'error', role: 'alert', text: ui.error }));
  return el;
}

/** An answer Max just gave from the panel, with "Take back" (a mis-tap) while he may. */
function renderTakeBack(decision, ctx, ui) {
  const headingId = `${ctx.prefix}-decision-${decision.id}`;
  const el = h('article', {
    class: 'decision answered', tabindex: '-1', 'aria-labelledby': headingId,
    'data-decision-id': decision.id, 'data-component-id': decision.component_id,
  });
  el.append(h('h3', { id: headingId, text: decision.title || t('decision.question') }),
    h('p', { class: 'question', text: decision.body }),
    h('p', { class: 'answered' }, h('strong', { text: t('decision.you_answered') }), decision.answer_text || ''),
    h('div', { class: 'controls' }, h('button', {
      type: 'button', class: 'option take-back', disabled: !!ui.busy, onclick: () => ctx.retract(decision),
      'aria-label': t('decision.take_back_label', { question: decision.body }),
    }, t('card.take_back'))));
  if (ui.error) el.append(h('p', { class: 'error', role: 'alert', text: ui.error }));
  return el;
}

function optionButtons(decision, enabled, ctx) {
  const options = [...decision.options].sort((a, b) => Number(!!b.recommended) - Number(!!a.recommended));
  const group = h('div', { class: 'controls', role: 'group', 'aria-label': t('card.options_label', { question: decision.body }) });
  for (const option of options) {
    group.append(h('button', {
      type: 'button', class: `option${option.recommended ? ' recommended' : ''}`, disabled: !enabled,
      'aria-label': option.recommended ? t('card.recommended_label', { label: option.label }) : option.label,
      onclick: () => ctx.settle(decision, [option.id], null),
    }, option.label,
    option.recommended ? h('span', { class: 'rec', 'aria-hidden': 'true', text: t('card.recommended') }) : null));
  }
  return group;
}

function multipleForm(decision, def, enabled, ctx) {
  const boxes = [];
  const fieldset = h('fieldset', { class: 'controls multiple', disabled: !enabled },
    h('legend', { class: 'sr-only', text: decision.body }));
  for (const option of def.options) {
    const box = h('input', { type: 'checkbox', value: option.id, id: `${ctx.prefix}-dcb-${decision.id}-${option.id}` });
    boxes.push(box);
    fieldset.append(h('label', { class: 'check', for: box.id }, box, ' ', option.label,
      option.recommended ? h('span', { class: 'rec', text: t('card.recommended') }) : null));
  }
  fieldset.append(h('button', { type: 'submit', class: 'primary' }, t('card.submit')));
  return h('form', {
    onsubmit: (event) => {
      event.preventDefault();
      ctx.settle(decision, boxes.filter((b) => b.checked).map((b) => b.value), null);
    },
  }, fieldset);
}

function textForm(decision, enabled, ui, ctx) {
  const secret = !!decision.sensitive;
  const input = h('input', {
    type: secret ? 'password' : 'text', class: `reply${secret ? ' secret' : ''}`,
    autocomplete: secret ? 'new-password' : 'off', disabled: !enabled,
    placeholder: secret ? t('card.secret_placeholder') : t('card.reply'),
    'aria-label': secret ? t('card.secret_to', { question: decision.body }) : t('decision.reply_to', { question: decision.body }),
    oninput: secret ? null : (e) => { ctx.ui(`d${decision.id}`).draft = e.target.value; },
  });
  if (!secret) input.value = ui.draft || '';
  return h('form', {
    class: 'reply-form',
    onsubmit: (event) => {
      event.preventDefault();
      const text = input.value;
      if (secret) input.value = ''; // never left in the page
      ctx.settle(decision, [], text, { secret });
    },
  }, input, h('button', { type: 'submit', class: 'primary', disabled: !enabled,
    'aria-label': secret ? t('decision.secret_submit') : t('decision.send_reply', { question: decision.body }) },
  secret ? t('card.submit') : t('card.send')));
}

/** Main's nudge bar: the newest bar decision, answerable here, with a snooze button. */
export function renderNudge(decisions, ctx) {
  const first = decisions[0];
  const bar = h('section', { class: 'nudge', 'aria-label': t('nudge.region'), role: 'region' });
  bar.append(h('p', { class: 'nudge-title' },
    h('strong', { text: t('nudge.title') }),
    decisions.length > 1 ? h('span', { text: t('nudge.waiting', { count: decisions.length }) }) : null));
  bar.append(renderDecision(first, ctx, { compact: true }));
  bar.append(h('div', { class: 'nudge-actions' },
    h('button', { type: 'button', class: 'link-button', onclick: () => ctx.openThread(first.thread_id) },
      t('nudge.open_main')),
    h('button', {
      type: 'button', class: 'link-button', onclick: () => ctx.snooze(first),
      'aria-label': t('nudge.snooze_label', { minutes: SNOOZE_MINUTES }),
    }, t('nudge.snooze'))));
  return bar;
}
