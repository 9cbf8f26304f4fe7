// Max's thread tools (issue 30): rename, archive and delete the thread on screen, and a search
// box over every thread whose results jump to the message. Kept apart from the card code: it
// adds its own elements to the layout and calls the session's public methods only.

import { describeError } from './api.js';
import { h, replaceChildren, t } from './dom.js';

const enc = encodeURIComponent;

/** Add the thread actions to the thread's header and the search box to the threads drawer. */
export function installThreadTools(session, el) {
  const api = session.api;
  const request = (method, path, body) => api.raw(method, path, body);

  // ---- the thread on screen: rename, archive, delete ------------------------------------
  const status = h('p', { class: 'error', role: 'alert', id: 'thread-tools-error', hidden: true });
  const say = (err) => {
    status.textContent = err ? describeError(err) : '';
    status.hidden = !err;
  };
  const current = () => session.store.threads.get(session.threadId);
  const keep = (thread) => {
    if (thread) session.store.upsert('threads', thread);
  };
  const rename = h('button', { type: 'button', class: 'link-button', id: 'thread-rename',
    onclick: async () => {
      const thread = current();
      if (!thread) return;
      const title = window.prompt(t('tools.rename_prompt'), thread.title || '');
      if (title === null || !title.trim()) return;
      try {
        keep(await request('PATCH', `/v1/threads/${enc(thread.id)}`, { title }));
        say(null);
      } catch (err) { say(err); }
    } }, t('tools.rename'));
  const archive = h('button', { type: 'button', class: 'link-button', id: 'thread-archive',
    onclick: async () => {
      const thread = current();
      if (!thread) return;
      const archived = !thread.archived_at;
      let body = { archived };
      if (archived && thread.open_cards) {
        // OK withdraws its open questions (reason "archived"); Cancel keeps them open
        body = { archived, keep_cards_open: !window.confirm(
          t('tools.withdraw_confirm', { count: thread.open_cards })) };
      }
      try {
        keep(await request('PATCH', `/v1/threads/${enc(thread.id)}`, body));
        say(null);
        session.render();
      } catch (err) { say(err); }
    } }, t('tools.archive'));
  const remove = h('button', { type: 'button', class: 'link-button danger', id: 'thread-delete',
    onclick: async () => {
      const thread = current();
      if (!thread) return;
      if (!window.confirm(t('tools.delete_confirm', { title: thread.title || t('tools.this_thread') }))) return;
      try {
        await request('DELETE', `/v1/threads/${enc(thread.id)}?confirm=${enc(thread.id)}`);
        forget(session, thread.id);
        say(null);
        session.openThread(session.me.main_thread_id);
      } catch (err) { say(err); }
    } }, t('tools.delete'));
  const actions = h('div', { class: 'thread-actions', id: 'thread-actions' }, rename, archive, remove);
  el.threadTitle.parentElement.append(actions, status);

  // ---- search --------------------------------------------------------------------------
  const input = h('input', { type: 'search', id: 'search-input', 'aria-label': t('tools.search_label'),
    placeholder: t('tools.search_placeholder'), maxlength: '200', autocomplete: 'off' });
  const results = h('ul', { class: 'search-results', id: 'search-results', 'aria-label': t('tools.results') });
  const form = h('form', { class: 'search', role: 'search',
    onsubmit: async (event) => {
      event.preventDefault();
      const q = input.value.trim();
      if (!q) {
        replaceChildren(results);
        return;
      }
      try {
        const page = await request('GET', `/v1/search?q=${enc(q)}&limit=20`);
        replaceChildren(results, page.results.length
          ? page.results.map((hit) => resultItem(session, hit))
          : h('li', { class: 'empty', text: t('tools.nothing') }));
      } catch (err) {
        replaceChildren(results, h('li', { class: 'error', text: describeError(err) }));
      }
    } }, input);
  el.threadList.parentElement.insertBefore(h('div', { class: 'search-wrap' }, form, results), el.threadList);

  return {
    /** Keep the action buttons in step with the thread on screen. */
    render() {
      const thread = current();
      actions.hidden = !thread || thread.kind === 'main';
      archive.textContent = thread && thread.archived_at ? t('tools.unarchive') : t('tools.archive');
    },
  };
}

/** One result: the snippet with its highlights as <mark> (text only, never HTML). */
function resultItem(session, hit) {
  const parts = [];
  let at = 0;
  for (const [start, end] of hit.highlights) {
    if (start > at) parts.push(hit.snippet.slice(at, start));
    parts.push(h('mark', { text: hit.snippet.slice(start, end) }));
    at = end;
  }
  parts.push(hit.snippet.slice(at));
  return h('li', {},
    h('button', { type: 'button', class: 'search-hit', 'data-kind': hit.kind,
      'data-message-id': hit.message_id === null ? null : String(hit.message_id),
      onclick: () => jumpTo(session, hit.thread_id, hit.message_id) },
    h('span', { class: 'search-thread', text: hit.thread_title || t('tools.untitled') }),
    h('span', { class: 'search-snippet' }, parts)));
}

/** Open the thread, then scroll to the message and mark it once it is on screen. */
function jumpTo(session, threadId, messageId) {
  session.openThread(threadId);
  if (messageId === null || messageId === undefined) return;
  // an older message than the thread's newest page: load back to it first
  session.loadBackTo(threadId, Number(messageId));
  const deadline = Date.now() + 10000;
  const look = () => {
    const row = session.el.timeline.querySelector(`[data-message-id="${Number(messageId)}"]`);
    // once the thread's page is in (a later render would jump to its end otherwise)
    if (row && session.loaded.has(threadId) && !session.renderQueued) {
      session.jumpToEnd = false;
      for (const old of session.el.timeline.querySelectorAll('.search-target')) old.classList.remove('search-target');
      row.classList.add('search-target');
      row.scrollIntoView({ block: 'center' });
      if (!row.hasAttribute('tabindex')) row.setAttribute('tabindex', '-1');
      row.focus();
    } else if (Date.now() < deadline) {
      setTimeout(look, 100);
    }
  };
  setTimeout(look, 50);
}

/** A deleted thread leaves the client's copy too. */
function forget(session, threadId) {
  session.store.threads.delete(threadId);
  session.store.byThread.delete(threadId);
  for (const [id, message] of session.store.messages) {
    if (message.thread_id === threadId) session.store.messages.delete(id);
  }
  for (const [id, decision] of session.store.decisions) {
    if (decision.thread_id === threadId) session.store.decisions.delete(id);
  }
  session.render();
}
