// "Connect an agent": mint an agent token bound to one thread, show it once with the
// configuration each agent host needs, list the account's tokens and revoke them; and "Sign in
// on your phone": a one-time link and its QR code. The token lives only in this dialog's
// memory: closing it forgets the token (the server keeps only its hash).

import { describeError } from './api.js';
import { formatTime, h, replaceChildren, t } from './dom.js';
import { threadLabel } from './layout.js';

const tr = t; // where `t` names a token

const NEW_THREAD = '__new__';
const HOOK = 'maxclaw-hook';

// i18n-ignore-start: product names, file names and the code each host runs, as written
export const HOSTS = [
  { id: 'claude-code', label: 'Claude Code' },
  { id: 'codex', label: 'Codex CLI' },
  { id: 'cursor', label: 'Cursor' },
  { id: 'openai-agents', label: 'OpenAI Agents SDK' },
  { id: 'langgraph', label: 'LangGraph' },
  { id: 'bridge', label: 'maxclaw bridge' },
];

const json = (value) => JSON.stringify(value, null, 2);

/** The files and commands a host needs, as [{ file, text }]; `url` is this page's origin. */
export function hostConfig(host, { url, token, threadId }) {
  const mcp = `${url}/mcp`;
  const bearer = `Bearer ${token}`;
  const hook = [{ hooks: [{ type: 'command', command: HOOK }] }];
  switch (host) {
    case 'claude-code':
      return [
        { file: '.mcp.json', text: json({ mcpServers: { maxclaw: {
          type: 'http', url: mcp, headers: { Authorization: bearer } } } }) },
        { file: t('connect.file.claude_settings'),
          text: json({
            env: { MAXCLAW_URL: url, MAXCLAW_TOKEN: token, MAXCLAW_THREAD: threadId },
            hooks: {
              SessionStart: hook, UserPromptSubmit: hook,
              PostToolUse: [{ matcher: '*', hooks: hook[0].hooks }], Stop: hook,
            },
          }) },
      ];
    case 'codex':
      return [
        { file: t('connect.file.codex'),
          text: `[mcp_servers.maxclaw]\nurl = "${mcp}"\nbearer_token_env_var = "MAXCLAW_TOKEN"\n` },
        { file: t('connect.file.shell_codex'), text: `export MAXCLAW_TOKEN='${token}'\n` },
      ];
    case 'cursor':
      return [{ file: '.cursor/mcp.json', text: json({ mcpServers: { maxclaw: {
        url: mcp, headers: { Authorization: bearer } } } }) }];
    case 'openai-agents':
      return [{ file: t('connect.file.python', { packages: 'openai-agents' }), text: [
        'from agents import Agent, Runner',
        'from agents.mcp import MCPServerStreamableHttp',
        '',
        'async with MCPServerStreamableHttp(',
        '    name="maxclaw",',
        `    params={"url": "${mcp}",`,
        `            "headers": {"Authorization": "${bearer}"}},`,
        ') as maxclaw:',
        '    agent = Agent(name="Assistant", mcp_servers=[maxclaw],',
        '                  instructions="Ask the user with ask_user_question; do not wait.")',
        '    result = await Runner.run(agent, "…")',
        ''].join('\n') }];
    case 'langgraph':
      return [{ file: t('connect.file.python', { packages: 'langchain-mcp-adapters langgraph' }), text: [
        'from langchain_mcp_adapters.client import MultiServerMCPClient',
        'from langgraph.prebuilt import create_react_agent',
        '',
        'client = MultiServerMCPClient({"maxclaw": {',
        '    "transport": "streamable_http",',
        `    "url": "${mcp}",`,
        `    "headers": {"Authorization": "${bearer}"},`,
        '}})',
        'tools = await client.get_tools()',
        'agent = create_react_agent("openai:gpt-4.1", tools)',
        ''].join('\n') }];
    case 'bridge':
      return [{ file: t('connect.file.bridge'),
        text: `export MAXCLAW_URL=${url} MAXCLAW_TOKEN='${token}'\n`
          + `maxclaw bridge --thread ${threadId} --session SESSION_ID -- claude -p --resume {session} {prompt}\n` }];
    default:
      return [];
  }
}
// i18n-ignore-end

function copyButton(text, label) {
  return h('button', {
    type: 'button', class: 'link-button copy', 'aria-label': label,
    onclick: async (event) => {
      try {
        await navigator.clipboard.writeText(text);
        event.target.textContent = t('connect.copied');
      } catch {
        event.target.textContent = t('connect.copy_manual');
      }
    },
  }, t('connect.copy'));
}

function tokenKind(token) {
  if (token.role === 'user') return t('connect.kind.user');
  if (token.for_main) return t('connect.kind.main');
  if (token.thread_id) return t('connect.kind.thread');
  return t('connect.kind.any');
}

function ensureDialog(id, session, labelledBy, opener) {
  let dialog = document.getElementById(id);
  if (!dialog) {
    dialog = h('dialog', { id, class: 'notifications connect', 'aria-labelledby': labelledBy });
    dialog.addEventListener('close', () => opener()?.focus());
    document.body.append(dialog);
  }
  return dialog;
}

export async function openConnect(session) {
  const dialog = ensureDialog('connect', session, 'connect-title', () => session.el.connectButton);
  const view = new ConnectView(session, dialog);
  dialog.addEventListener('close', () => { view.minted = null; }, { once: true });
  await view.render();
  if (!dialog.open) dialog.showModal();
  return view;
}

class ConnectView {
  constructor(session, dialog) {
    this.session = session;
    this.api = session.api;
    this.dialog = dialog;
    this.host = 'claude-code';
    this.minted = null; // { token, id, thread_id }: shown until the dialog closes
    this.tokens = [];
    this.confirming = null;
    this.error = '';
    this.message = '';
    this.busy = false;
  }

  async load() {
    try {
      this.tokens = (await this.api.tokens()).tokens;
    } catch (err) {
      this.error = describeError(err);
    }
  }

  async render() {
    await this.load();
    this.draw();
  }

  draw() {
    const close = h('button', {
      type: 'button', class: 'icon-button', 'aria-label': t('connect.close'),
      onclick: () => this.dialog.close(),
    }, '×');
    replaceChildren(this.dialog,
      h('div', { class: 'drawer-head' }, h('h2', { id: 'connect-title', text: t('connect.title') }), close),
      h('p', { class: 'help', text: t('connect.help') }),
      this.minted ? this.mintedView() : this.mintForm(),
      h('section', { class: 'push-section', 'aria-labelledby': 'tokens-title' },
        h('h3', { id: 'tokens-title', text: t('connect.tokens') }),
        this.tokenList()),
      h('p', { class: 'push-message', role: 'status', hidden: !this.message, text: this.message }),
      h('p', { class: 'error', role: 'alert', id: 'connect-error', hidden: !this.error, text: this.error }));
  }

  threads() {
    return [...this.session.store.threads.values()]
      .filter((t) => t.kind !== 'main')
      .sort((a, b) => threadLabel(a).localeCompare(threadLabel(b)));
  }

  hostSelect(id) {
    return h('select', { id, onchange: (event) => { this.host = event.target.value; this.draw(); } },
      HOSTS.map((host) => h('option', { value: host.id, text: host.label, selected: host.id === this.host })));
  }

  mintForm() {
    const current = this.session.threadId;
    const threads = this.threads();
    const thread = h('select', { id: 'connect-thread' },
      threads.map((t) => h('option', { value: t.id, text: threadLabel(t), selected: t.id === current })),
      h('option', { value: NEW_THREAD, text: t('connect.new_thread_option'), selected: !threads.some((t) => t.id === current) }));
    const title = h('input', { type: 'text', id: 'connect-new-title', maxlength: '500', placeholder: t('connect.new_title_placeholder') });
    const name = h('input', { type: 'text', id: 'connect-name', maxlength: '200', placeholder: t('connect.name_placeholder') });
    const expiry = h('select', { id: 'connect-expiry' },
      h('option', { value: '', text: t('connect.never') }),
      h('option', { value: '30', text: t('connect.days', { count: 30 }) }),
      h('option', { value: '90', text: t('connect.days', { count: 90 }) }));
    const showTitle = () => { title.parentElement.hidden = thread.value !== NEW_THREAD; };
    thread.addEventListener('change', showTitle);
    const form = h('form', {
      class: 'connect-form', 'aria-label': t('connect.mint_form'),
      onsubmit: (event) => {
        event.preventDefault();
        this.mint(thread.value, title.value.trim(), name.value.trim(), expiry.value);
      },
    },
    h('label', { for: 'connect-thread', text: t('connect.thread') }), thread,
    h('div', { class: 'connect-field' }, h('label', { for: 'connect-new-title', text: t('connect.new_title') }), title),
    h('label', { for: 'connect-host', text: t('connect.host') }), this.hostSelect('connect-host'),
    h('label', { for: 'connect-name', text: t('connect.name') }), name,
    h('label', { for: 'connect-expiry', text: t('connect.expires') }), expiry,
    h('button', { type: 'submit', class: 'primary', id: 'connect-mint', disabled: this.busy }, t('connect.create')));
    queueMicrotask(showTitle);
    return h('section', { class: 'push-section', 'aria-labelledby': 'connect-new' },
      h('h3', { id: 'connect-new', text: t('connect.new_token') }), form);
  }

  async mint(threadValue, title, name, expiry) {
    const body = { role: 'agent', name: name || HOSTS.find((x) => x.id === this.host).label };
    if (threadValue === NEW_THREAD) body.new_thread = { title: title || t('connect.default_thread') };
    else body.thread_id = threadValue;
    if (expiry) body.expires_in_days = Number(expiry);
    this.busy = true;
    this.error = '';
    try {
      this.minted = await this.api.mintToken(body);
      this.message = '';
    } catch (err) {
      this.error = describeError(err);
    }
    this.busy = false;
    await this.render();
  }

  mintedView() {
    const { token } = this.minted;
    const config = hostConfig(this.host, {
      url: location.origin, token, threadId: this.minted.thread_id,
    });
    return h('section', { class: 'push-section minted', 'aria-labelledby': 'connect-minted' },
      h('h3', { id: 'connect-minted', text: t('connect.minted') }),
      h('p', { class: 'help', text: t('connect.minted_help') }),
      h('div', { class: 'token-line' }, h('code', { id: 'minted-token', text: token }), copyButton(token, t('connect.copy_token'))),
      h('label', { for: 'connect-host-after', text: t('connect.config_for') }), this.hostSelect('connect-host-after'),
      config.map((part) => h('figure', { class: 'snippet' },
        h('figcaption', {}, h('span', { text: part.file }), ' ', copyButton(part.text, t('connect.copy_file', { file: part.file }))),
        h('pre', { class: 'snippet-text', dataset: { host: this.host }, text: part.text }))),
      h('button', { type: 'button', id: 'connect-another', onclick: () => { this.minted = null; this.render(); } },
        t('connect.another')));
  }

  tokenList() {
    if (!this.tokens.length) return h('p', { class: 'help', text: t('connect.no_tokens') });
    return h('ul', { class: 'push-devices token-list' }, this.tokens.map((t) => {
      const where = t.thread_id ? tr('connect.token_thread', { title: t.thread_title || t.thread_id }) : '';
      const meta = [tokenKind(t), where,
        t.last_used_at ? tr('connect.last_used', { when: formatTime(t.last_used_at) }) : tr('connect.never_used'),
        t.expires_at ? tr('connect.expires_at', { when: formatTime(t.expires_at) }) : ''].filter(Boolean).join(' · ');
      return h('li', { class: 'push-device token-item', dataset: { tokenId: String(t.id) } },
        h('span', { class: 'push-device-name', text: t.name || (t.role === 'user' ? tr('connect.user_token') : tr('connect.agent_token')) }),
        h('span', { class: 'push-device-meta', text: meta }),
        this.revokeControl(t));
    }));
  }

  revokeControl(t) {
    if (t.current) return h('span', { class: 'help', text: tr('connect.this_browser') });
    if (this.confirming !== t.id) {
      return h('button', { type: 'button', class: 'danger revoke', onclick: () => { this.confirming = t.id; this.draw(); } }, tr('connect.revoke'));
    }
    return h('span', { class: 'confirm-revoke' },
      h('button', { type: 'button', class: 'danger', id: `revoke-confirm-${t.id}`, onclick: () => this.revoke(t) }, tr('connect.revoke_now')),
      h('button', { type: 'button', class: 'link-button', onclick: () => { this.confirming = null; this.draw(); } }, tr('connect.keep')));
  }

  async revoke(t) {
    this.confirming = null;
    try {
      await this.api.revokeToken(t.id);
      this.message = tr('connect.revoked', { name: t.name || tokenKind(t) });
      this.error = '';
      if (this.minted && this.minted.id === t.id) this.minted = null;
    } catch (err) {
      this.error = describeError(err);
    }
    await this.render();
  }
}

// ---- Sign in on your phone ------------------------------------------------------------

export async function openPhoneSignin(session) {
  const dialog = ensureDialog('phone-signin', session, 'phone-title', () => session.el.phoneButton);
  const view = new PhoneView(session, dialog);
  dialog.addEventListener('close', () => view.stop(), { once: true });
  if (!dialog.open) dialog.showModal();
  await view.fresh();
  return view;
}

class PhoneView {
  constructor(session, dialog) {
    this.session = session;
    this.dialog = dialog;
    this.code = null;
    this.error = '';
    this.timer = null;
  }

  stop() {
    clearInterval(this.timer);
    this.code = null;
  }

  async fresh() {
    clearInterval(this.timer);
    try {
      this.code = await this.session.api.signinCode(location.origin);
      this.error = '';
    } catch (err) {
      this.code = null;
      this.error = describeError(err);
    }
    this.draw();
    this.timer = setInterval(() => this.tick(), 1000);
  }

  tick() {
    const line = this.dialog.querySelector('#phone-expiry');
    if (!line || !this.code) return;
    const left = Math.max(0, Math.round((new Date(this.code.expires_at) - Date.now()) / 1000));
    line.textContent = left > 0
      ? t('phone.left', { minutes: Math.floor(left / 60), seconds: String(left % 60).padStart(2, '0') })
      : t('phone.expired');
  }

  draw() {
    const close = h('button', {
      type: 'button', class: 'icon-button', 'aria-label': t('phone.close'),
      onclick: () => this.dialog.close(),
    }, '×');
    const body = this.code ? [
      h('p', { class: 'help', text: t('phone.help') }),
      h('img', { class: 'qr', id: 'phone-qr', alt: t('phone.qr'), width: '220', height: '220',
        src: `data:image/svg+xml;charset=utf-8,${encodeURIComponent(this.code.qr_svg)}` }),
      h('div', { class: 'token-line' }, h('code', { id: 'phone-link', text: this.code.url }), copyButton(this.code.url, t('phone.copy_link'))),
      h('p', { id: 'phone-expiry', role: 'status' }),
    ] : [];
    replaceChildren(this.dialog,
      h('div', { class: 'drawer-head' }, h('h2', { id: 'phone-title', text: t('phone.title') }), close),
      ...body,
      h('button', { type: 'button', id: 'phone-new', onclick: () => this.fresh() }, t('phone.new')),
      h('p', { class: 'error', role: 'alert', hidden: !this.error, text: this.error }));
    this.tick();
  }
}
