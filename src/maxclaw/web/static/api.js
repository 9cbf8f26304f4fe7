// The REST client: every call carries the user token; error bodies become ApiError with the
// server's own sentence, so the UI can show what went wrong in words.

import { t } from './dom.js';

export class ApiError extends Error {
  constructor(status, code, message, data) {
    super(message);
    this.status = status;
    this.code = code;
    this.data = data || {};
  }
}

// What each error code means for the person at the keyboard (catalogue `error.<code>`, in his
// locale); the server's own sentence follows as the server wrote it.
const CODES = new Set(['settled', 'locked', 'not_transferable', 'irreversible', 'conflict',
  'invalid', 'unauthorized', 'forbidden', 'not_found', 'too_large', 'bad_request', 'unavailable',
  'internal', 'network', 'too_late']);

/** One readable line for an error: what kind of refusal, then the server's own words. */
export function describeError(err) {
  if (!(err instanceof ApiError)) return t('error.unexpected', { detail: err && err.message ? err.message : err });
  const title = CODES.has(err.code) ? t(`error.${err.code}`) : t('error.status', { status: err.status });
  // the server's own sentences are the contract's English: shown to an English reader only
  if (self.MaxClawI18n.locale() !== 'en') return title;
  // a 422 names each problem; its message repeats the first one behind a field path
  const details = (err.data && Array.isArray(err.data.errors) ? err.data.errors : [])
    .map((e) => e && e.msg).filter(Boolean).map(sentence);
  if (details.length) return [title, ...details].join(' ');
  return err.message ? `${title} ${err.message}` : title;
}

function sentence(text) {
  const trimmed = String(text).trim();
  const capital = trimmed.charAt(0).toUpperCase() + trimmed.slice(1);
  return /[.!?]$/.test(capital) ? capital : `${capital}.`;
}

export function createApi(getToken, onUnauthorized) {
  async function request(method, path, body) {
    const headers = { Accept: 'application/json', Authorization: `Bearer ${getToken()}` };
    const init = { method, headers, cache: 'no-store' };
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(path, init);
    } catch {
      throw new ApiError(0, 'network', t('error.network_retrying'));
    }
    if (response.status === 204) return null;
    let payload = null;
    try {
      payload = await response.json();
    } catch {
      payload = null;
    }
    if (!response.ok) {
      const err = new ApiError(
        response.status,
        (payload && payload.code) || `http_${response.status}`,
        (payload && payload.message) || t('error.status', { status: response.status }),
        payload && payload.data,
      );
      if (response.status === 401 && onUnauthorized) onUnauthorized(err);
      throw err;
    }
    return payload;
  }

  const enc = encodeURIComponent;
  return {
    raw: request, // threadtools.js: the thread and search routes
    me: () => request('GET', '/v1/me'),
    threads: () => request('GET', '/v1/threads?limit=500'),
    createThread: (title, kind) => request('POST', '/v1/threads', { title, kind, category: null }),
    // backwards: the newest page (beforeId null), or the page just before a message
    messagesBefore: (threadId, beforeId, limit) => request('GET',
      `/v1/threads/${enc(threadId)}/messages?${beforeId === null ? 'latest=true' : `before_id=${beforeId}`}&limit=${limit}`),
    postMessage: (threadId, body) => request('POST', `/v1/threads/${enc(threadId)}/messages`, { body }),
    component: (id) => request('GET', `/v1/components/${enc(id)}`),
    answer: (id, selected, text) => request('POST', `/v1/components/${enc(id)}/answer`,
      { selected, text }),
    answerCard: (callId, answers) => request('POST', `/v1/cards/${enc(callId)}/answer`, { answers }),
    toMain: (id) => request('POST', `/v1/components/${enc(id)}/to-main`),
    revoke: (id) => request('POST', `/v1/components/${enc(id)}/revoke`),
    retract: (id) => request('POST', `/v1/components/${enc(id)}/retract`),
    stopTurn: (threadId) => request('POST', `/v1/threads/${enc(threadId)}/turn/stop`),
    decisions: (status) => request('GET', `/v1/decisions?status=${status || 'open'}&limit=500`),
    settle: (id, selected, text) => request('POST', `/v1/decisions/${enc(id)}/settle`,
      { selected, text }),
    dismiss: (id) => request('POST', `/v1/decisions/${enc(id)}/dismiss`),
    decision: (id) => request('GET', `/v1/decisions/${enc(id)}`),
    snooze: (id, minutes) => request('POST', `/v1/decisions/${enc(id)}/snooze`, { minutes }),
    pushConfig: () => request('GET', '/v1/push/config'),
    pushDevices: () => request('GET', '/v1/push/devices'),
    registerPushDevice: (device) => request('POST', '/v1/push/devices', device),
    deletePushDevice: (id) => request('DELETE', `/v1/push/devices/${enc(id)}`),
    tokens: () => request('GET', '/v1/tokens'),
    mintToken: (body) => request('POST', '/v1/tokens', body),
    revokeToken: (id) => request('DELETE', `/v1/tokens/${enc(id)}`),
    signinCode: (origin) => request('POST', '/v1/signin/codes', { origin }),
    settings: () => request('GET', '/v1/settings'),
    patchSettings: (patch) => request('PATCH', '/v1/settings', patch),
    pushTest: (deviceId) => request('POST', '/v1/push/test', deviceId ? { device_id: deviceId } : {}),
  };
}
