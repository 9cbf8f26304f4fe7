// Boot: take a `#token=` link or the remembered token, else show the sign-in form.

import { ApiError, createApi, describeError } from './api.js';
import { h, replaceChildren } from './dom.js';
import { registerServiceWorker, startPush } from './notifications.js';
import { Session } from './session.js';

const TOKEN_KEY = 'maxclaw.token';
const root = document.getElementById('app');

/** A `#token=…` link (printed by `maxclaw serve`): keep the token, clear it from the URL. */
function takeTokenFromLink() {
  const match = location.hash.match(/^#token=([^&]+)/);
  if (!match) return null;
  history.replaceState(null, '', location.pathname + location.search);
  try {
    return decodeURIComponent(match[1]).trim();
  } catch {
    return null;
  }
}

function signOut(message) {
  localStorage.removeItem(TOKEN_KEY);
  showSignIn(message);
}

function showSignIn(message) {
  document.title = 'Sign in · MaxClaw';
  root.removeAttribute('aria-busy');
  document.body.className = 'signin-page';
  const input = h('input', {
    type: 'password', id: 'token-input', name: 'token', autocomplete: 'off', spellcheck: 'false',
    required: true, 'aria-describedby': 'token-help',
  });
  const error = h('p', { class: 'error', role: 'alert', id: 'signin-error' });
  error.textContent = message || '';
  error.hidden = !message;
  const button = h('button', { type: 'submit', class: 'primary' }, 'Sign in');
  const form = h('form', {
    class: 'signin', 'aria-labelledby': 'signin-title',
    onsubmit: async (event) => {
      event.preventDefault();
      const token = input.value.trim();
      if (!token) return;
      button.disabled = true;
      error.hidden = true;
      const problem = await checkToken(token);
      button.disabled = false;
      if (problem) {
        error.textContent = problem;
        error.hidden = false;
        input.focus();
        return;
      }
      input.value = '';
      localStorage.setItem(TOKEN_KEY, token);
      start(token);
    },
  },
  h('h1', { id: 'signin-title', text: 'MaxClaw' }),
  h('p', { text: 'Questions from your agents, answered when it suits you.' }),
  h('label', { for: 'token-input', text: 'User token' }),
  input,
  h('p', { class: 'help', id: 'token-help' },
    'Paste a user token (', h('code', { text: 'maxclaw token create --user NAME --role user' }),
    '), or open the link ', h('code', { text: 'maxclaw serve' }), ' printed.'),
  button, error);
  replaceChildren(root, h('main', { class: 'signin-wrap' }, form));
  input.focus();
}

/** null when the token is a working user token, else a sentence saying what is wrong. */
async function checkToken(token) {
  try {
    await createApi(() => token, null).me();
    return null;
  } catch (err) {
    return tokenProblem(err);
  }
}

function tokenProblem(err) {
  if (err instanceof ApiError && err.status === 401) {
    return 'That token was refused. Check it, or mint a new one with maxclaw token create.';
  }
  if (err instanceof ApiError && err.status === 403) {
    return 'That is an agent token. The WebUI needs a user token (--role user).';
  }
  return describeError(err);
}

async function start(token) {
  document.body.className = '';
  const session = new Session(root, token, { signOut });
  try {
    await session.start();
    startPush(session);
  } catch (err) {
    session.stop();
    if (err instanceof ApiError && (err.status === 401 || err.status === 403)) {
      signOut(tokenProblem(err));
      return;
    }
    showUnreachable(token, err);
  }
}

function showUnreachable(token, err) {
  root.removeAttribute('aria-busy');
  const offline = err instanceof ApiError && err.code === 'network';
  const retry = h('button', { type: 'button', class: 'primary', onclick: () => start(token) }, 'Retry');
  replaceChildren(root, h('main', { class: 'signin-wrap' },
    h('div', { class: 'signin', id: 'unreachable', 'data-offline': offline ? 'true' : 'false' },
      h('h1', { text: 'MaxClaw' }),
      offline ? h('p', { class: 'offline-state', role: 'status', text: 'Offline — reconnecting…' }) : null,
      h('p', { class: 'error', role: 'alert', text: describeError(err) }),
      retry,
      h('button', { type: 'button', class: 'link-button', onclick: () => signOut() }, 'Use another token'))));
  retry.focus();
  // the server may just be restarting: try again by itself (at once when the network returns)
  const again = () => { if (retry.isConnected) start(token); };
  setTimeout(again, 3000);
  window.addEventListener('online', again, { once: true });
}

/** The account behind a token: `{ me }`, `{ refused: true }` (401/403), or `{ error }`. */
async function whoIs(token) {
  try {
    return { me: await createApi(() => token, null).me() };
  } catch (err) {
    if (err instanceof ApiError && (err.status === 401 || err.status === 403)) return { refused: true };
    return { error: err };
  }
}

/** A `#token=` link while signed in: the same account (or a dead current token) switches
 * quietly; another account is asked about first, naming both, because a link someone else
 * made would otherwise move this browser into their account (login CSRF). */
async function takeLinkedToken(linked, current) {
  if (!current || linked === current) return linked;
  const [mine, theirs] = await Promise.all([whoIs(current), whoIs(linked)]);
  if (mine.refused) return linked;
  if (theirs.refused) return current;
  if (mine.me && theirs.me && mine.me.user_id === theirs.me.user_id) return linked;
  return new Promise((resolve) => showSwitchPrompt(mine.me, theirs.me, resolve, linked, current));
}

function showSwitchPrompt(mine, theirs, resolve, linked, current) {
  document.title = 'Switch account? · MaxClaw';
  root.removeAttribute('aria-busy');
  document.body.className = 'signin-page';
  const name = (who) => (who ? who.name : 'an account that could not be checked');
  const stay = h('button', { type: 'button', class: 'primary', id: 'switch-stay',
    onclick: () => resolve(current) }, `Stay signed in as ${mine ? mine.name : 'before'}`);
  const go = h('button', { type: 'button', class: 'link-button', id: 'switch-go',
    onclick: () => resolve(linked) }, `Switch to ${name(theirs)}`);
  replaceChildren(root, h('main', { class: 'signin-wrap' },
    h('div', { class: 'signin', id: 'switch-account', role: 'alertdialog',
      'aria-labelledby': 'switch-title', 'aria-describedby': 'switch-help' },
      h('h1', { id: 'switch-title', text: 'Switch account?' }),
      h('p', { id: 'switch-help' },
        'This link signs in as ', h('strong', { class: 'switch-theirs', text: name(theirs) }),
        '. You are signed in as ', h('strong', { class: 'switch-mine', text: name(mine) }),
        '. Switch only if you asked for this link: in another account, what you answer goes to ',
        'that account\'s agents.'),
      stay, go)));
  stay.focus();
}

async function boot() {
  registerServiceWorker();
  const linked = takeTokenFromLink();
  if (linked) {
    const chosen = await takeLinkedToken(linked, localStorage.getItem(TOKEN_KEY));
    localStorage.setItem(TOKEN_KEY, chosen);
  }
  const token = localStorage.getItem(TOKEN_KEY);
  if (token) start(token);
  else showSignIn();
}

boot();
