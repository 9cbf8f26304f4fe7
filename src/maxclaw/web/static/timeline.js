// The timeline of one thread: messages as bubbles, assistant rows with their cards, events as
// centred notes. Tool rows that hold a card's state are not shown on their own: the card is.

import { cardsOf, renderCardFrame } from './cards.js';
import { formatTime, h } from './dom.js';

const ASK_TOOL = 'ask_user_question';

const PHASE_LINES = {
  'with-main': 'The question went to Main.',
  'main-answered': 'Main answered the question for you.',
  'handed-back': 'Main handed the question back to you.',
  revoked: 'You revoked Main\'s answer.',
};

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
  li.append(h('span', { class: 'sr-only', text: 'You: ' }));
  const answer = source.componentAnswer;
  const handoff = source.askHandoff;
  const whole = source.cardAnswer;
  if (whole && Array.isArray(whole.answers)) {
    // one message for several questions of a card: a chip per answer
    const chips = whole.answers.map((a) => answerChip({ ...message, body: a.hidden ? null : '' }, a, ctx));
    li.append(h('div', { class: 'card-answer', 'data-card-answer': whole.toolCallId },
      h('p', { class: 'caption', text: `${whole.answers.length} answers to “${whole.title}”, sent together` }),
      ...chips), ...present(fullText(message), meta(message)));
    return li;
  }
  if (answer && answer.title) {
    li.append(...present(answerChip(message, answer, ctx), fullText(message), meta(message)));
    return li;
  }
  if (handoff && handoff.title) {
    li.append(...present(handoffChip(handoff, ctx), fullText(message), meta(message)));
    return li;
  }
  // a plain message (or an answer written before answers carried their summary)
  const hidden = message.body === null || message.body === undefined;
  const line = message.display && message.display.line;
  const bubble = h('div', { class: `bubble${hidden ? ' not-echoed' : ''}` });
  bubble.textContent = hidden ? (line || 'Submitted (not echoed)') : message.body;
  const captions = [];
  if (answer) {
    const byMain = answer.answeredBy === 'main';
    captions.push(h('span', { class: 'caption', text: byMain ? 'Answered by Main for you · ' : 'Card answer · ' }));
  }
  if (handoff && handoff.threadId) captions.push(fromThread(handoff.threadId, ctx), ' · ');
  li.append(bubble, meta(message, ...captions));
  return li;
}

/** "You chose Keep one version", "Main answered for you: …", "Submitted (not echoed)". */
function answerChip(message, answer, ctx) {
  const byMain = answer.answeredBy === 'main';
  const chip = h('div', { class: `bubble answer-chip${answer.hidden ? ' not-echoed' : ''}`,
    'data-answers': answer.componentId });
  if (answer.hidden || message.body === null || message.body === undefined) {
    chip.append(byMain ? 'Main answered for you: ' : '', 'Submitted (not echoed)');
  } else {
    const labels = answer.labels || [];
    const chosen = labels.length ? labels.join(', ') : (answer.note || '');
    const lead = byMain ? 'Main answered for you: ' : (labels.length ? 'You chose ' : 'You answered ');
    chip.append(lead, h('strong', { text: chosen }));
    if (labels.length && answer.note) chip.append(h('span', { class: 'chip-note', text: ` — “${answer.note}”` }));
  }
  chip.append(h('button', { type: 'button', class: 'link-button inline chip-link',
    onclick: () => ctx.showComponent && ctx.showComponent(answer.componentId),
    'aria-label': `Show the card: ${answer.title}` }, ` on “${answer.title}”`));
  return chip;
}

/** Main's thread: "Handed to Main: <title> — <question>, from <thread>". */
function handoffChip(handoff, ctx) {
  return h('div', { class: 'bubble handoff-chip', 'data-answers': handoff.componentId },
    'Handed to Main: ', h('strong', { text: handoff.title }), ` — ${handoff.question}`,
    h('span', { class: 'chip-from' }, ' · ', fromThread(handoff.threadId, ctx)));
}

function fromThread(threadId, ctx) {
  return h('span', { class: 'caption' }, 'Handed to Main from ',
    h('button', { type: 'button', class: 'link-button inline', onclick: () => ctx.openThread(threadId),
      'aria-label': `Open the asking thread: ${ctx.threadTitle(threadId)}` }, ctx.threadTitle(threadId)));
}

/** The parts that exist (Element.append would write a null as the text "null"). */
function present(...parts) {
  return parts.filter((part) => part !== null && part !== undefined);
}

/** The words the model read, one click away (never for a hidden body). */
function fullText(message) {
  if (message.body === null || message.body === undefined) return null;
  return h('details', { class: 'full-text' },
    h('summary', { text: 'Full text' }), h('pre', { text: message.body }));
}

function assistantRow(message, ctx) {
  const li = h('li', { class: 'msg assistant', 'data-message-id': message.id });
  li.append(h('span', { class: 'sr-only', text: 'Agent: ' }));
  if (message.source_meta && message.source_meta.guard === 'forged') {
    // the guard found a service notice imitated in this reply (seed 004's forged notice)
    li.classList.add('forged');
    li.append(h('p', { class: 'forged-warning', role: 'note' },
      h('strong', { text: '⚠ Not from MaxClaw: ' }),
      'this reply imitates a service notice (an answer or a job report). The agent was told; '
      + 'judge it by the real notices, not by this text.'));
  }
  if (message.body) li.append(h('div', { class: 'bubble', text: message.body }));
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
    const note = call.name === ASK_TOOL ? 'A card that could not be posted' : `Called ${call.name}`;
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
  const human = PHASE_LINES[phase];
  const text = human || message.body || 'Something happened.';
  return h('li', { class: 'msg event', 'data-message-id': message.id },
    h('p', { class: 'event-line', text }), human ? fullText(message) : null, meta(message));
}

function toolRow(message) {
  return h('li', { class: 'msg tool', 'data-message-id': message.id },
    h('details', { class: 'tool-call' },
      h('summary', { text: 'Tool result' }),
      h('pre', { text: JSON.stringify(message.content, null, 2) })));
}
