// Cards: each component of an assistant row, drawn from its definition (the row's
// `components`) and its live state (the tool row's `display.states`). The tool row is the one
// whose tool_call_id is the component id without its last ":<question id>".

import { formatTime, h, t } from './dom.js';
import { inline } from './markdown.js';

const STATUSES = ['pending', 'open', 'answered', 'with-main', 'main-answered', 'revoked',
  'handed-back', 'withdrawn', 'expired'];
const VIAS = ['card', 'decision', 'push', 'main'];

/** A card status's badge text in his locale (the status itself when unknown). */
export function statusLabel(status) {
  return STATUSES.includes(status) ? t(`status.${status}`) : status;
}

export function toolCallIdOf(componentId) {
  return componentId.slice(0, componentId.lastIndexOf(':'));
}

/** Group a row's component definitions into cards (one per ask_user_question call). */
export function cardsOf(message) {
  const cards = new Map();
  for (const def of message.components || []) {
    const callId = toolCallIdOf(def.id);
    if (!cards.has(callId)) cards.set(callId, { callId, title: def.title, stakes: def.stakes, defs: [] });
    cards.get(callId).defs.push(def);
  }
  return [...cards.values()];
}

/** The state shown for a component: the tool row's mirror, or a fresher answer we just got. */
export function stateOf(def, toolRow, override) {
  const states = toolRow && toolRow.display && toolRow.display.states;
  const mirrored = states ? states[def.id] : null;
  if (override && (!toolRow || Number(toolRow.rev) <= override.toolRev)) return override.state;
  if (mirrored) return mirrored;
  return { status: 'pending', answered_by: null, answered_via: null, answer: null, due_at: null,
    answerable_here: false, main_may_take: false };
}

function optionLabel(def, id) {
  const found = [...(def.options || []), ...(def.actions || [])].find((o) => o.id === id);
  return found ? found.label : id;
}

/** "Keep one version — note", or the not-echoed line for a secret. */
export function answerSummary(def, answer) {
  if (!answer) return '';
  if (answer.hidden || def.kind === 'secret') return t('card.not_echoed');
  const parts = (answer.selected || []).map((id) => optionLabel(def, id));
  if (answer.text) parts.push(t('card.quoted', { text: answer.text }));
  return parts.join(t('card.list_sep'));
}

function whoAnswered(state) {
  if (state.answered_by === 'main' || state.answered_via === 'main') return t('card.who_main');
  const via = VIAS.includes(state.answered_via) ? t(`via.${state.answered_via}`) : '';
  return via ? t('card.who_you_via', { via }) : t('card.who_you');
}

function statusLine(def, state, card, thread) {
  const when = state.due_at ? formatTime(state.due_at) : '';
  switch (state.status) {
    case 'open':
      if (!state.main_may_take) return t('card.line.only_you');
      return when ? t('card.line.main_at', { time: when }) : t('card.line.waiting');
    case 'answered':
      return t('card.line.answered_by', { who: whoAnswered(state) });
    case 'with-main':
      return t('card.line.with_main');
    case 'main-answered':
      return t('card.line.main_answered');
    case 'revoked':
      return t('card.line.revoked');
    case 'handed-back':
      return t('card.line.handed_back');
    case 'withdrawn':
      // the agent's reason is shown as the agent wrote it
      return state.superseded_by ? t('card.line.superseded')
        : t('card.line.withdrawn', { reason: state.withdrawn_reason || t('card.line.no_reason') });
    case 'expired':
      return t('card.line.expired');
    default:
      return t('card.line.posting');
  }
}

/**
 * The element of one component. `ctx` gives ui(id), setUi(id, patch), and the actions.
 * What Max may do is the server's word (`state.answerable_here`, `state.main_may_take`, sent
 * with every state from the transitions table): the page does not re-derive the rules.
 */
export function renderComponent(def, card, message, thread, state, ctx) {
  const ui = ctx.ui(def.id);
  const answerable = state.answerable_here === true && !ui.busy;
  const questionId = `q-${cssId(def.id)}`;
  const el = h('div', {
    class: `component status-${state.status}`, tabindex: '-1',
    'data-component-id': def.id, 'data-status': state.status,
    'aria-labelledby': questionId,
  });
  el.append(
    h('div', { class: 'component-head' },
      h('p', { class: 'question', id: questionId }, ...inline(def.question)),
      h('span', { class: `badge badge-${state.status}`, text: statusLabel(state.status) })),
    h('p', { class: 'status-line', text: statusLine(def, state, card, thread) }),
  );
  const summary = answerSummary(def, state.answer);
  if (summary && (state.status === 'answered' || state.status === 'main-answered')) {
    el.append(h('p', { class: 'answer-summary' },
      h('span', { class: 'answer-label', text: state.status === 'main-answered' ? t('card.main_chose') : t('card.answer') }),
      h('span', { class: 'answer-value', text: summary })));
  }
  if (state.seen_at) {
    // the third time point (seed 004): the model was handed the answer
    el.append(h('p', { class: 'seen-line', text: t('card.seen', { time: formatTime(state.seen_at) }) }));
  }
  el.append(renderControls(def, state, answerable, ui, ctx));
  el.append(renderFooter(def, card, thread, state, ui, ctx));
  if (ui.error) el.append(h('p', { class: 'error', role: 'alert', text: ui.error }));
  return el;
}

function renderControls(def, state, enabled, ui, ctx) {
  // a settled question of a card with several is drawn like any other (its answer pressed)
  if (enabled && ctx.multi && ctx.multi(def)) return draftControls(def, state, enabled, ui, ctx);
  switch (def.kind) {
    case 'choice':
      return def.multiple ? multipleChoice(def, state, enabled, ui, ctx) : singleChoice(def, state, enabled, ui, ctx);
    case 'text':
      return textReply(def, enabled, ui, ctx);
    case 'secret':
      return secretInput(def, enabled, ctx);
    case 'object':
      return objectCard(def, state, enabled, ctx);
    default:
      return h('p', { class: 'muted', text: t('card.unknown_kind', { kind: def.kind }) });
  }
}

/**
 * A question of a card with several: nothing is sent on a tap; the choices and words stay
 * drafts (in memory) until the card's one Send answers every drafted question at once.
 */
function draftControls(def, state, enabled, ui, ctx) {
  const wrap = h('div', { class: 'draft-controls' });
  if (def.kind === 'object') wrap.append(renderObject(def.object));
  if (def.kind === 'choice' && def.multiple) {
    const fieldset = multipleChoice(def, state, enabled, ui, ctx).querySelector('fieldset');
    fieldset.querySelector('button[type=submit]').remove(); // the card's Send submits
    wrap.append(fieldset);
    return wrap;
  }
  if (def.kind === 'choice' || def.kind === 'object') {
    const picked = new Set(ui.picked || []);
    const group = h('div', { class: 'controls', role: 'group', 'aria-label': t('card.options_label', { question: def.question }) });
    for (const option of def.kind === 'choice' ? def.options : def.actions) {
      group.append(optionButton(def, option, picked.has(option.id), enabled,
        () => ctx.setUi(def.id, { picked: picked.has(option.id) ? [] : [option.id] })));
    }
    wrap.append(group);
    if (def.kind === 'choice' && def.allow_other) {
      wrap.append(draftInput(def, ui, ctx, 'input', t('card.other_own'), t('card.other')));
    }
    return wrap;
  }
  if (def.kind === 'text') {
    wrap.append(draftInput(def, ui, ctx, 'textarea', t('card.answer_to', { question: def.question }), def.placeholder || t('card.reply')));
    return wrap;
  }
  if (def.kind === 'secret') {
    // kept only in this page's memory until Send, then emptied whatever the server says
    const input = h('input', {
      type: 'password', class: 'reply secret', autocomplete: 'new-password', spellcheck: 'false',
      'aria-label': t('card.secret_to', { question: def.question }),
      placeholder: def.placeholder || t('card.secret_placeholder'),
      oninput: (e) => { ctx.ui(def.id).secret = e.target.value; },
      onkeydown: sendOnCtrlEnter(def, ctx),
    });
    input.value = ui.secret || '';
    wrap.append(input);
    return wrap;
  }
  return h('p', { class: 'muted', text: t('card.unknown_kind', { kind: def.kind }) });
}

/** Ctrl+Enter (or ⌘+Enter) in a drafted field sends the whole card, as its Send does. */
function sendOnCtrlEnter(def, ctx) {
  return (e) => {
    if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      ctx.sendCardOf(def);
    }
  };
}

function draftInput(def, ui, ctx, field, label, placeholder) {
  const input = h(field, {
    class: 'reply', 'aria-label': label, placeholder, rows: field === 'textarea' ? '3' : null,
    oninput: (e) => { ctx.ui(def.id).draft = e.target.value; },
    onkeydown: sendOnCtrlEnter(def, ctx),
  });
  input.value = ui.draft || '';
  return input;
}

/** What a drafted question would send, or null when nothing was drafted for it. */
export function draftAnswer(def, ui) {
  const text = def.kind === 'secret' ? (ui.secret || '') : (ui.draft || '');
  const note = text.trim() ? text : null;
  if (def.kind === 'text' || def.kind === 'secret') return note ? { selected: [], text: note } : null;
  const selected = def.kind === 'choice' && def.multiple ? (ui.checked || []) : (ui.picked || []);
  return selected.length || note ? { selected: [...selected], text: note } : null;
}

/** The foot of a card with several questions: its one Send (and the card's error, if any). */
export function renderCardFoot(card, states, ui, ctx) {
  const open = card.defs.filter((def) => states[def.id] && states[def.id].answerable_here);
  const foot = h('div', { class: 'card-foot' });
  if (!open.length) return foot;
  foot.append(h('button', {
    type: 'button', class: 'primary card-send', disabled: !!ui.busy,
    'aria-label': t('card.send_card', { title: card.title }),
    onclick: () => ctx.answerCard(card, open),
  }, ui.busy ? t('card.sending') : t('card.send')));
  foot.append(h('span', { class: 'muted', text: t('card.send_hint') }));
  if (ui.error) foot.append(h('p', { class: 'error', role: 'alert', text: ui.error }));
  return foot;
}

function chosen(state) {
  return new Set((state.answer && state.answer.selected) || []);
}

function optionButton(def, option, picked, enabled, onClick) {
  return h('button', {
    type: 'button', class: `option${option.recommended ? ' recommended' : ''}`,
    disabled: !enabled, 'aria-pressed': picked ? 'true' : 'false',
    'aria-label': option.recommended ? t('card.recommended_label', { label: option.label }) : option.label,
    onclick: onClick,
  }, option.label, option.recommended ? h('span', { class: 'rec', 'aria-hidden': 'true', text: t('card.recommended') }) : null);
}

function singleChoice(def, state, enabled, ui, ctx) {
  const picked = chosen(state);
  const group = h('div', { class: 'controls', role: 'group', 'aria-label': t('card.options_label', { question: def.question }) });
  for (const option of def.options) {
    group.append(optionButton(def, option, picked.has(option.id), enabled,
      () => ctx.answer(def.id, [option.id], null)));
  }
  if (def.allow_other) {
    group.append(h('button', {
      type: 'button', class: 'option other', disabled: !enabled,
      'aria-expanded': ui.otherOpen ? 'true' : 'false',
      onclick: () => ctx.setUi(def.id, { otherOpen: !ui.otherOpen, focusOther: true }),
    }, t('card.other')));
  }
  const wrap = h('div', {}, group);
  if (def.allow_other && ui.otherOpen && enabled) {
    wrap.append(textForm(def, ui, ctx, { label: t('card.own_answer'), placeholder: t('card.other'),
      submit: (text) => ctx.answer(def.id, [], text), field: 'input' }));
  }
  return wrap;
}

function multipleChoice(def, state, enabled, ui, ctx) {
  const picked = enabled ? new Set(ui.checked || []) : chosen(state);
  const fieldset = h('fieldset', { class: 'controls multiple', disabled: !enabled });
  fieldset.append(h('legend', { class: 'sr-only', text: def.question }));
  for (const option of def.options) {
    const box = h('input', {
      type: 'checkbox', value: option.id, id: `cb-${cssId(def.id)}-${option.id}`,
      onchange: (event) => {
        const next = new Set(ctx.ui(def.id).checked || []);
        if (event.target.checked) next.add(option.id); else next.delete(option.id);
        ctx.ui(def.id).checked = [...next]; // a draft: no re-render needed
      },
    });
    box.checked = picked.has(option.id);
    fieldset.append(h('label', { class: `check${option.recommended ? ' recommended' : ''}`, for: box.id },
      box, ' ', option.label,
      option.recommended ? h('span', { class: 'rec', text: t('card.recommended') }) : null));
  }
  let note = null;
  if (def.allow_other) {
    note = h('input', { type: 'text', class: 'other-text', 'aria-label': t('card.other_words'),
      placeholder: t('card.other'), oninput: (e) => { ctx.ui(def.id).draft = e.target.value; } });
    note.value = ui.draft || '';
    fieldset.append(note);
  }
  fieldset.append(h('button', {
    type: 'submit', class: 'primary', 'aria-label': t('card.submit_choices', { question: def.question }),
  }, t('card.submit')));
  const form = h('form', {
    class: 'multiple-form',
    onsubmit: (event) => {
      event.preventDefault();
      const text = note && note.value.trim() ? note.value : null;
      ctx.answer(def.id, [...(ctx.ui(def.id).checked || [])], text);
    },
  }, fieldset);
  return form;
}

function textForm(def, ui, ctx, { label, placeholder, submit, field }) {
  const input = h(field, {
    class: 'reply', 'aria-label': label, placeholder,
    rows: field === 'textarea' ? '3' : null,
    oninput: (e) => { ctx.ui(def.id).draft = e.target.value; },
    onkeydown: (e) => {
      if (e.key === 'Enter' && (field === 'input' || e.ctrlKey || e.metaKey)) {
        e.preventDefault();
        e.target.form.requestSubmit();
      }
    },
  });
  input.value = ui.draft || '';
  if (ui.focusOther) {
    queueMicrotask(() => input.focus());
    ui.focusOther = false;
  }
  return h('form', {
    class: 'reply-form',
    onsubmit: (event) => {
      event.preventDefault();
      submit(input.value);
    },
  }, input, h('button', { type: 'submit', class: 'primary', 'aria-label': t('card.send_label', { label }) }, t('card.send')));
}

function textReply(def, enabled, ui, ctx) {
  if (!enabled) return h('div', { class: 'controls' });
  return textForm(def, ui, ctx, {
    label: t('card.answer_to', { question: def.question }), placeholder: def.placeholder || t('card.reply'),
    submit: (text) => ctx.answer(def.id, [], text), field: 'textarea',
  });
}

function secretInput(def, enabled, ctx) {
  if (!enabled) return h('div', { class: 'controls' });
  // Never a value attribute, never a draft kept anywhere: the field is emptied the moment
  // the answer leaves, whatever the server says, so the secret is not left in the page.
  const input = h('input', {
    type: 'password', class: 'reply secret', autocomplete: 'new-password', spellcheck: 'false',
    'aria-label': t('card.secret_to', { question: def.question }),
    placeholder: def.placeholder || t('card.secret_placeholder'),
  });
  return h('form', {
    class: 'reply-form',
    onsubmit: (event) => {
      event.preventDefault();
      const secret = input.value;
      input.value = '';
      ctx.answer(def.id, [], secret, { secret: true });
    },
  }, input, h('button', {
    type: 'submit', class: 'primary', 'aria-label': t('card.submit_secret', { question: def.question }),
  }, t('card.submit')));
}

/** A diff's lines coloured by kind; anything else pretty-printed. */
export function renderObject(object) {
  if (object && typeof object === 'object' && object.type === 'diff' && typeof object.content === 'string') {
    const pre = h('pre', { class: 'diff', tabindex: '0', 'aria-label': t('card.diff') });
    for (const line of object.content.replace(/\n$/, '').split('\n')) {
      let kind = 'ctx';
      if (line.startsWith('+++') || line.startsWith('---') || line.startsWith('diff ')
          || line.startsWith('index ')) kind = 'meta';
      else if (line.startsWith('@@')) kind = 'hunk';
      else if (line.startsWith('+')) kind = 'add';
      else if (line.startsWith('-')) kind = 'del';
      pre.append(h('span', { class: `line ${kind}`, text: line || ' ' }));
    }
    return pre;
  }
  const text = typeof object === 'string' ? object : JSON.stringify(object, null, 2);
  return h('pre', { class: 'object', tabindex: '0', 'aria-label': t('card.object'), text });
}

function objectCard(def, state, enabled, ctx) {
  const picked = chosen(state);
  const actions = h('div', { class: 'controls', role: 'group', 'aria-label': t('card.actions_label', { question: def.question }) });
  for (const action of def.actions) {
    actions.append(h('button', {
      type: 'button', class: 'option action', disabled: !enabled,
      'aria-pressed': picked.has(action.id) ? 'true' : 'false',
      onclick: () => ctx.answer(def.id, [action.id], null),
    }, action.label));
  }
  return h('div', { class: 'object-wrap' }, renderObject(def.object), actions);
}

function renderFooter(def, card, thread, state, ui, ctx) {
  const footer = h('div', { class: 'component-foot' });
  if (state.main_may_take === true) {
    footer.append(h('button', {
      type: 'button', class: 'link-button', disabled: !!ui.busy,
      'aria-label': t('card.let_main_label', { question: def.question }), onclick: () => ctx.toMain(def.id),
    }, t('card.let_main')));
  }
  if (state.status === 'with-main') {
    footer.append(h('button', {
      type: 'button', class: 'link-button', onclick: () => ctx.openPanel(def.id),
      'aria-label': t('card.from_panel_label', { question: def.question }),
    }, t('card.from_panel')));
  }
  if (state.status === 'main-answered') {
    footer.append(
      h('button', {
        type: 'button', class: 'link-button', 'aria-expanded': ui.reasonOpen ? 'true' : 'false',
        onclick: () => ctx.why(def.id),
      }, t('card.why')),
      h('button', {
        type: 'button', class: 'danger', disabled: !!ui.busy,
        'aria-label': t('card.revoke_label', { question: def.question }), onclick: () => ctx.revoke(def.id),
      }, t('card.revoke')),
    );
  }
  if (mayTakeBack(state)) footer.append(takeBackButton(def, ui, ctx));
  if (state.status === 'handed-back') {
    footer.append(h('button', {
      type: 'button', class: 'link-button', 'aria-expanded': ui.reasonOpen ? 'true' : 'false',
      onclick: () => ctx.why(def.id),
    }, t('card.why')));
  }
  if (ui.reasonOpen && (state.status === 'main-answered' || state.status === 'revoked')) {
    footer.append(h('p', { class: 'reason' },
      h('span', { class: 'answer-label', text: t('card.main_reason') }),
      h('span', { text: ui.reason === undefined ? t('card.loading') : (ui.reason || t('card.no_reason')) })));
  }
  if (ui.reasonOpen && state.status === 'handed-back') {
    footer.append(h('p', { class: 'reason' },
      h('span', { class: 'answer-label', text: t('card.main_note') }),
      h('span', { text: ui.reason === undefined ? t('card.loading') : (ui.reason || t('card.no_note')) })));
  }
  return footer;
}

/** Max's own answer that no model has seen yet may be taken back (the server checks the window). */
function mayTakeBack(state) {
  return state.status === 'answered' && state.answered_by === 'max' && !state.seen_at;
}

function takeBackButton(def, ui, ctx) {
  return h('button', {
    type: 'button', class: 'link-button take-back', disabled: !!ui.busy,
    'aria-label': t('card.take_back_label', { question: def.question }), onclick: () => ctx.retract(def.id),
  }, t('card.take_back'));
}

function cssId(value) {
  return value.replace(/[^A-Za-z0-9_-]/g, '_');
}

/** The card frame; its components are filled in (and kept up to date) by the caller. */
export function renderCardFrame(card) {
  const titleId = `card-${cssId(card.callId)}`;
  return h('section', { class: `card${card.stakes === 'irreversible' ? ' irreversible' : ''}`,
    'aria-labelledby': titleId, 'data-card': card.callId },
  h('header', { class: 'card-head' },
    h('h3', { id: titleId, text: card.title }),
    card.stakes === 'irreversible'
      ? h('span', { class: 'badge badge-irreversible', text: t('card.irreversible') }) : null));
}
