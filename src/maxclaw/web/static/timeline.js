// The timeline of one thread: messages as bubbles, assistant rows with their cards, events as
// centred notes. Tool rows that hold a card's state are not shown on their own: the card is.

import { cardsOf, renderCardFrame } from './cards.js';
import { formatTime, h, t } from './dom.js';
import { renderMarkdown } from './markdown.js';

const ASK_TOOL = 'ask_user_question';

// a known service event, as a person would say it (catalogue `timeline.phase.<phase>`)
const PHASES = ['with-main', 'main-answered', 'handed-back', 'revoked'];

/** Whether a row has its own bubble (a card's tool row is drawn as the card instead). */
export function isShown(message) {
  if (message.role !== 'tool') return true;
  return !(message.display && message.display.kind === 'components');
}

/**
 * One timeline item. ctx: {threadTitle(id), openThread(id), showComponent(id),
 * componentEl(def, card, message)}.
 */
export function renderMessage(message, ctx) {
  switch (message.role) {
    case 'user':
      return userRow(message, ctx);
    case 'assistant':
      return assistantRow(message, ctx);
    case 'event':
      return eventRow(message, ctx);
    default:
      return toolRow(message);
  }
}

function meta(message, ...extra) {
  return h('p', { class: 'meta' }, ...extra,
    h('time', { datetime: message.created_at, text: formatTime(message.created_at) }));
}

function userRow(message, ctx) {
  const source = message.source_meta || {};
  const li = h('li', { class: 'msg user', 'data-message-id': message.id });
  li.append(h('span', { class: 'sr-only', text: t('timeline.you') }));
  const answer = source.componentAnswer;
  const handoff = source.askHandoff;
  const whole = source.cardAnswer;
  if (whole && Array.isArray(whole.answers)) {
    // one message for several questions of a card: a chip per answer
    const chips = whole.answers.map((a) => answerChip({ ...message, body: a.hidden ? null : '' }, a, ctx));
    li.append(h('div', { class: 'card-answer', 'data-card-answer': whole.toolCallId },
      h('p', { class: 'caption', text: t('timeline.card_answers', { count: whole.answers.length, title: whole.title }) }),
      ...chips), ...present(fullText(message), meta(message)));
    return li;
  }
  if (answer && answer.title) {
    if (source.retracted) return takenBackRow(li, message, answer, ctx);
    li.append(...present(answerChip(message, answer, ctx), fullText(message), meta(message)));
    return li;
  }
  if (handoff && handoff.title) {
    li.append(...present(handoffChip(handoff, ctx), fullText(message), meta(message)));
    return li;
  }
  // a plain message (or an answer written before answers carried their summary)
  const hidden = message.body === null || message.body === undefined;
  const bubble = h('div', { class: `bubble${hidden ? ' not-echoed' : ''}` });
  // the server's line for a hidden body is its English "Submitted (not echoed)": ours instead
  bubble.textContent = hidden ? t('card.not_echoed') : message.body;
  const captions = [];
  if (answer) {
    const byMain = answer.answeredBy === 'main';
    captions.push(h('span', { class: 'caption', text: byMain ? t('timeline.by_main_caption') : t('timeline.card_answer_caption') }));
  }
  if (handoff && handoff.threadId) captions.push(fromThread(handoff.threadId, ctx), ' · ');
  li.append(bubble, meta(message, ...captions));
  return li;
}

/** An answer Max took back (source_meta.retracted): struck through; no model ever read it. */
function takenBackRow(li, message, answer, ctx) {
  li.classList.add('taken-back');
  const chip = answerChip(message, answer, ctx);
  chip.classList.add('retracted');
  li.append(chip, meta(message, h('span', { class: 'caption', text: t('timeline.taken_back') })));
  return li;
}

/** "You chose Keep one version", "Main answered for you: …", "Submitted (not echoed)". */
function answerChip(message, answer, ctx) {
  const byMain = answer.answeredBy === 'main';
  const chip = h('div', { class: `bubble answer-chip${answer.hidden ? ' not-echoed' : ''}`,
    'data-answers': answer.componentId });
  if (answer.hidden || message.body === null || message.body === undefined) {
    chip.append(byMain ? t('timeline.main_for_you') : '', t('card.not_echoed'));
  } else {
    const labels = answer.labels || [];
    const chosen = labels.length ? labels.join(t('card.list_sep')) : (answer.note || '');
    const lead = byMain ? t('timeline.main_for_you') : (labels.length ? t('timeline.you_chose') : t('timeline.you_answered'));
    chip.append(lead, h('strong', { text: chosen }));
    if (labels.length && answer.note) chip.append(h('span', { class: 'chip-note', text: t('timeline.note', { note: answer.note }) }));
  }
  chip.append(h('button', { type: 'button', class: 'link-button inline chip-link',
    onclick: () => ctx.showComponent && ctx.showComponent(answer.componentId),
    'aria-label': t('timeline.show_card', { title: answer.title }) }, t('timeline.on_card', { title: answer.title })));
  return chip;
}

/** Main's thread: "Handed to Main: <title> — <question>, from <thread>". */
function handoffChip(handoff, ctx) {
  return h('div', { class: 'bubble handoff-chip', 'data-answers': handoff.componentId },
    t('timeline.handed'), h('strong', { text: handoff.title }), t('timeline.handed_question', { question: handoff.question }),
    h('span', { class: 'chip-from' }, ' · ', fromThread(handoff.threadId, ctx)));
}

function fromThread(threadId, ctx) {
  return h('span', { class: 'caption' }, t('timeline.handed_from'),
    h('button', { type: 'button', class: 'link-button inline', onclick: () => ctx.openThread(threadId),
      'aria-label': t('timeline.open_asking', { title: ctx.threadTitle(threadId) }) }, ctx.threadTitle(threadId)));
}

/** The parts that exist (Element.append would write a null as the text "null"). */
function present(...parts) {
  return parts.filter((part) => part !== null && part !== undefined);
}

/** The words the model read, one click away (never for a hidden body). */
function fullText(message) {
  if (message.body === null || message.body === undefined) return null;
  return h('details', { class: 'full-text' },
    h('summary', { text: t('timeline.full_text') }), h('pre', { text: message.body }));
}

function assistantRow(message, ctx) {
  const li = h('li', { class: 'msg assistant', 'data-message-id': message.id });
  li.append(h('span', { class: 'sr-only', text: t('timeline.agent') }));
  if (message.source_meta && message.source_meta.guard === 'forged') {
    // the guard found a service notice imitated in this reply (seed 004's forged notice)
    li.classList.add('forged');
    li.append(h('p', { class: 'forged-warning', role: 'note' },
      h('strong', { text: t('timeline.forged') }), t('timeline.forged_body')));
  }
  if (message.body) li.append(h('div', { class: 'bubble rich' }, renderMarkdown(message.body)));
  const cards = cardsOf(message);
  const posted = new Set(cards.map((c) => c.callId));
  for (const card of cards) {
    const frame = renderCardFrame(card);
    for (const def of card.defs) frame.append(ctx.componentEl(def, card, message));
    const foot = card.defs.length > 1 ? ctx.cardFootEl(card, message) : null;
    if (foot) frame.append(foot);
    li.append(frame);
  }
  for (const call of message.tool_calls || []) {
    if (call.name === ASK_TOOL && posted.has(call.id)) continue;
    const note = call.name === ASK_TOOL ? t('timeline.not_posted') : t('timeline.called', { name: call.name });
    li.append(h('details', { class: 'tool-call' },
      h('summary', { text: note }),
      h('pre', { text: JSON.stringify(call.arguments, null, 2) })));
  }
  li.append(meta(message));
  return li;
}

function eventRow(message) {
  const phase = message.source_meta && message.source_meta.askHandoff
    && message.source_meta.askHandoff.phase;
  // a known service event reads as a person would say it; the model's words stay one click away
  const human = PHASES.includes(phase) ? t(`timeline.phase.${phase}`) : null;
  const text = human || message.body || t('timeline.something');
  return h('li', { class: 'msg event', 'data-message-id': message.id },
    h('p', { class: 'event-line', text }), human ? fullText(message) : null, meta(message));
}

function toolRow(message) {
  return h('li', { class: 'msg tool', 'data-message-id': message.id },
    h('details', { class: 'tool-call' },
      h('summary', { text: t('timeline.tool_result') }),
      h('pre', { text: JSON.stringify(message.content, null, 2) })));
}
