// Boot: take a `#token=` or `#signin=` link or the remembered token, else show the sign-in form.

import { ApiError, createApi, describeError } from './api.js';
import { h, replaceChildren, t } from './dom.js';
import { currentLocale, useLocale } from './locale.js';
import { registerServiceWorker, startPush } from './notifications.js';
import { Session } from './session.js';
import { installShortcuts } from './shortcuts.js';
import { applyTheme } from './theme.js';

const TOKEN_KEY = 'maxclaw.token';
// i18n-ignore-start: commands, shown as they are typed
const COMMANDS = { token: 'maxclaw token create --user NAME --role user', serve: 'maxclaw serve' };
// i18n-ignore-end
const root = document.getElementById('app');
applyTheme(); // before anything is drawn: no flash of the other theme
useLocale(currentLocale()); // this device's last locale, else the browser's, until his settings load
installShortcuts();

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

/** A `#signin=CODE` link ("Sign in on your phone"): the one-time code, cleared from the URL. */
function takeSigninCode() {
  const match = location.hash.match(/^#signin=([A-Za-z0-9_-]+)$/);
  if (!match) return null;
  history.replaceState(null, '', location.pathname + location.search);
  return match[1];
}

/** Redeem a sign-in code for a user token of this device's own (the code works once). */
async function redeemCode(code) {
  const response = await fetch('/v1/signin/redeem', {
    method: 'POST', cache: 'no-store',
    headers: { Accept: 'application/json', 'Content-Type': 'application/json' },
    body: JSON.stringify({ code, name: deviceName() }),
  }).catch(() => null);
  if (!response) throw new ApiError(0, 'network', t('signin.link_network'));
  const payload = await response.json().catch(() => null);
  if (!response.ok) {
    throw new ApiError(response.status, (payload && payload.code) || `http_${response.status}`,
      (payload && payload.message) || t('error.status', { status: response.status }), payload && payload.data);
  }
  return payload;
}

function deviceName() {
  const ua = navigator.userAgent;
  const kind = /iPhone|iPad/.test(ua) ? 'iPhone/iPad' : /Android/.test(ua) ? 'Android' : t('signin.device_browser');
  return t('signin.device_name', { kind });
}

/** Ask before using the code: a link someone else made would sign this device into their
 * account (the same login CSRF a `#token=` link asks about). Resolves to a token or null. */
function showCodePrompt(code) {
  return new Promise((resolve) => {
    document.title = t('app.title', { page: t('signin.ask_title') });
    root.removeAttribute('aria-busy');
    document.body.className = 'signin-page';
    const error = h('p', { class: 'error', role: 'alert', hidden: true });
    const go = h('button', { type: 'button', class: 'primary', id: 'code-go' }, t('signin.code_go'));
    go.addEventListener('click', async () => {
      go.disabled = true;
      try {
        resolve((await redeemCode(code)).token);
      } catch (err) {
        error.textContent = describeError(err);
        error.hidden = false;
      }
    });
    const no = h('button', { type: 'button', class: 'link-button', id: 'code-no',
      onclick: () => resolve(null) }, t('signin.not_now'));
    const kept = localStorage.getItem(TOKEN_KEY);
    replaceChildren(root, h('main', { class: 'signin-wrap' },
      h('div', { class: 'signin', id: 'signin-code', role: 'alertdialog',
        'aria-labelledby': 'code-title', 'aria-describedby': 'code-help' },
        h('h1', { id: 'code-title', text: t('signin.ask_title') }),
        h('p', { id: 'code-help' }, t('signin.code_help'),
          kept ? ` ${t('signin.code_replaces')}` : ''),
        go, no, error)));
    go.focus();
  });
}

function signOut(message) {
  localStorage.removeItem(TOKEN_KEY);
  showSignIn(message);
}

function showSignIn(message) {
  document.title = t('app.title', { page: t('signin.title') });
  root.removeAttribute('aria-busy');
  document.body.className = 'signin-page';
  const input = h('input', {
    type: 'password', id: 'token-input', name: 'token', autocomplete: 'off', spellcheck: 'false',
    required: true, 'aria-describedby': 'token-help',
  });
  const error = h('p', { class: 'error', role: 'alert', id: 'signin-error' });
  error.textContent = message || '';
  error.hidden = !message;
  const button = h('button', { type: 'submit', class: 'primary' }, t('signin.submit'));
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
  h('h1', { id: 'signin-title', text: t('app.brand') }),
  h('p', { text: t('signin.tagline') }),
  h('label', { for: 'token-input', text: t('signin.token_label') }),
  input,
  h('p', { class: 'help', id: 'token-help' },
    t('signin.token_help_before'), h('code', { text: COMMANDS.token }),
    t('signin.token_help_middle'), h('code', { text: COMMANDS.serve }), t('signin.token_help_after')),
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
    return t('signin.refused');
  }
  if (err instanceof ApiError && err.status === 403) {
    return t('signin.agent_token');
  }
  return describeError(err);
}

async function start(token) {
  document.body.className = '';
  const session = new Session(root, token, { signOut, restart: () => start(token) });
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
  const retry = h('button', { type: 'button', class: 'primary', onclick: () => start(token) }, t('signin.retry'));
  replaceChildren(root, h('main', { class: 'signin-wrap' },
    h('div', { class: 'signin', id: 'unreachable', 'data-offline': offline ? 'true' : 'false' },
      h('h1', { text: t('app.brand') }),
      offline ? h('p', { class: 'offline-state', role: 'status', text: t('signin.offline') }) : null,
      h('p', { class: 'error', role: 'alert', text: describeError(err) }),
      retry,
      h('button', { type: 'button', class: 'link-button', onclick: () => signOut() }, t('signin.other_token')))));
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

/** What a `#token=` link leads to: `{ token }` to keep (null: none), and a `message` for the
 * sign-in form when nothing is kept. A link never signs this browser into an account without
 * asking and naming it, because a link someone else made would otherwise move the browser into
 * their account (login CSRF), and what it answers would go to their agents. Only a link for the
 * account already signed in (or the token in use) switches quietly. */
async function takeLinkedToken(linked, current) {
  if (linked === current) return { token: linked };
  const [mine, theirs] = await Promise.all([
    current ? whoIs(current) : Promise.resolve({ none: true }), whoIs(linked)]);
  if (theirs.refused) {
    return current ? { token: current } : { token: null, message: t('signin.link_refused') };
  }
  if (!theirs.me) {
    return current ? { token: current } : { token: null, message: t('signin.link_unchecked') };
  }
  if (mine.me && mine.me.user_id === theirs.me.user_id) return { token: linked };
  const chosen = await new Promise((resolve) => (mine.me
    ? showSwitchPrompt(mine.me, theirs.me, resolve, linked, current)
    : showLinkPrompt(theirs.me, Boolean(mine.refused), resolve, linked, current)));
  return { token: chosen };
}

/** A link in a browser with no working account: sign in as the account it names, or not. */
function showLinkPrompt(theirs, wasRefused, resolve, linked, current) {
  document.title = t('app.title', { page: t('signin.ask_title') });
  root.removeAttribute('aria-busy');
  document.body.className = 'signin-page';
  const go = h('button', { type: 'button', class: 'primary', id: 'link-go',
    onclick: () => resolve(linked) }, t('signin.as', { name: theirs.name }));
  const no = h('button', { type: 'button', class: 'link-button', id: 'link-no',
    onclick: () => resolve(current || null) }, t('signin.not_now'));
  replaceChildren(root, h('main', { class: 'signin-wrap' },
    h('div', { class: 'signin', id: 'signin-link', role: 'alertdialog',
      'aria-labelledby': 'link-title', 'aria-describedby': 'link-help' },
      h('h1', { id: 'link-title', text: t('signin.ask_title') }),
      h('p', { id: 'link-help' },
        wasRefused ? t('signin.kept_refused') : '',
        t('signin.link_as_before'), h('strong', { class: 'link-account', text: theirs.name }),
        t('signin.link_as_after')),
      go, no)));
  go.focus();
}

function showSwitchPrompt(mine, theirs, resolve, linked, current) {
  document.title = t('app.title', { page: t('signin.switch_title') });
  root.removeAttribute('aria-busy');
  document.body.className = 'signin-page';
  const name = (who) => (who ? who.name : t('signin.unchecked_account'));
  const stay = h('button', { type: 'button', class: 'primary', id: 'switch-stay',
    onclick: () => resolve(current) }, mine ? t('signin.stay', { name: mine.name }) : t('signin.stay_before'));
  const go = h('button', { type: 'button', class: 'link-button', id: 'switch-go',
    onclick: () => resolve(linked) }, t('signin.switch_to', { name: name(theirs) }));
  replaceChildren(root, h('main', { class: 'signin-wrap' },
    h('div', { class: 'signin', id: 'switch-account', role: 'alertdialog',
      'aria-labelledby': 'switch-title', 'aria-describedby': 'switch-help' },
      h('h1', { id: 'switch-title', text: t('signin.switch_title') }),
      h('p', { id: 'switch-help' },
        t('signin.link_as_before'), h('strong', { class: 'switch-theirs', text: name(theirs) }),
        t('signin.switch_mine'), h('strong', { class: 'switch-mine', text: name(mine) }),
        t('signin.switch_after')),
      stay, go)));
  stay.focus();
}

async function boot() {
  registerServiceWorker();
  const code = takeSigninCode();
  if (code) {
    const fresh = await showCodePrompt(code);
    if (fresh) localStorage.setItem(TOKEN_KEY, fresh);
  }
  const linked = takeTokenFromLink();
  if (linked) {
    const { token: chosen, message } = await takeLinkedToken(
      linked, localStorage.getItem(TOKEN_KEY));
    if (!chosen) {
      showSignIn(message);
      return;
    }
    localStorage.setItem(TOKEN_KEY, chosen);
  }
  const token = localStorage.getItem(TOKEN_KEY);
  if (token) start(token);
  else showSignIn();
}

boot();
