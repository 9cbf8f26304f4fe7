// The live connection: /v1/ws with a single-use ticket (POST /v1/ws-ticket with the token), subscribe from the last cursor, apply
// record.upsert frames, reconnect with backoff, and keep presence (`focus`) for the thread
// on screen.

const BACKOFF_MS = [500, 1000, 2000, 3000, 5000];
const PING_EVERY_MS = 20000;
const PONG_WITHIN_MS = 10000;

export class Live {
  /**
   * handlers: {getCursor(), setCursor(c), onRecord(table, record), onStatus(status, info),
   *            onResync(), onRefused(code)}
   */
  constructor(token, handlers) {
    this.token = token;
    this.handlers = handlers;
    this.ws = null;
    this.attempt = 0;
    this.retryTimer = null;
    this.pingTimer = null;
    this.lastFrameAt = 0;
    this.focusThread = null;
    this.stopped = true;
    this.status = 'connecting';
    this.synced = false;
    this.connecting = false;
  }

  start() {
    this.stopped = false;
    this.pingTimer = setInterval(() => this.keepAlive(), PING_EVERY_MS / 2);
    this.connect();
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.retryTimer);
    clearInterval(this.pingTimer);
    if (this.ws) {
      const ws = this.ws;
      this.ws = null;
      ws.close(1000, 'signed out');
    }
  }

  /** Connect now (the banner's "Retry now", or the browser coming back online). */
  retryNow() {
    if (this.stopped || (this.ws && this.ws.readyState <= WebSocket.OPEN)) return;
    clearTimeout(this.retryTimer);
    this.connect();
  }

  /** A single-use ticket for the socket, so the long-lived token never travels in a URL. */
  async ticket() {
    const resp = await fetch('/v1/ws-ticket', {
      method: 'POST', headers: { Authorization: `Bearer ${this.token}` },
    });
    if (resp.status === 401 || resp.status === 403) return { refused: resp.status === 401 ? 4401 : 4403 };
    if (!resp.ok) throw new Error(`ws-ticket: ${resp.status}`);
    return { ticket: (await resp.json()).ticket };
  }

  async connect() {
    clearTimeout(this.retryTimer);
    if (this.connecting) return;
    this.connecting = true;
    let got;
    try {
      got = await this.ticket();
    } catch {
      got = null;
    } finally {
      this.connecting = false;
    }
    if (this.stopped) return;
    if (got === null) {
      this.scheduleReconnect();
      return;
    }
    if (got.refused) {
      this.stop();
      this.handlers.onRefused(got.refused);
      return;
    }
    const scheme = location.protocol === 'https:' ? 'wss:' : 'ws:';
    const url = `${scheme}//${location.host}/v1/ws?ticket=${encodeURIComponent(got.ticket)}`;
    let ws;
    try {
      ws = new WebSocket(url);
    } catch {
      this.scheduleReconnect();
      return;
    }
    this.ws = ws;
    this.synced = false;
    this.setStatus(this.attempt === 0 && this.status === 'connecting' ? 'connecting' : 'reconnecting');
    ws.onopen = () => {
      this.lastFrameAt = Date.now();
      this.send({ op: 'subscribe', cursor: this.handlers.getCursor(), threads: null });
      this.sendFocus();
    };
    ws.onmessage = (event) => {
      if (this.ws !== ws) return;
      this.lastFrameAt = Date.now();
      let frame;
      try {
        frame = JSON.parse(event.data);
      } catch {
        return;
      }
      this.handle(frame);
    };
    ws.onclose = (event) => {
      if (this.ws !== ws) return;
      this.ws = null;
      this.synced = false;
      if (event.code === 4401 || event.code === 4403) {
        this.stop();
        this.handlers.onRefused(event.code);
        return;
      }
      this.scheduleReconnect();
    };
    ws.onerror = () => {}; // a close event follows and decides what to do
  }

  handle(frame) {
    switch (frame.type) {
      case 'record.upsert':
        this.handlers.onRecord(frame.table, frame.record);
        if (frame.cursor) this.handlers.setCursor(frame.cursor);
        break;
      case 'synced':
        if (frame.cursor) this.handlers.setCursor(frame.cursor);
        this.synced = true;
        this.attempt = 0;
        this.setStatus('online');
        break;
      case 'resync':
        this.handlers.setCursor(null);
        Promise.resolve(this.handlers.onResync()).finally(() => {
          this.send({ op: 'subscribe', cursor: null, threads: null });
        });
        break;
      case 'error':
        console.warn('maxclaw ws:', frame.code, frame.message);
        break;
      default: // hello, pong, focus.ok: lastFrameAt already says the link is alive
        break;
    }
  }

  scheduleReconnect() {
    if (this.stopped) return;
    const base = BACKOFF_MS[Math.min(this.attempt, BACKOFF_MS.length - 1)];
    const delay = Math.round(base * (0.8 + Math.random() * 0.4));
    this.attempt += 1;
    this.setStatus('offline', { retryAt: Date.now() + delay });
    this.retryTimer = setTimeout(() => this.connect(), delay);
  }

  keepAlive() {
    const ws = this.ws;
    if (!ws || ws.readyState !== WebSocket.OPEN) return;
    const quiet = Date.now() - this.lastFrameAt;
    if (quiet > PING_EVERY_MS + PONG_WITHIN_MS) {
      ws.close(4000, 'no answer to ping'); // a half-open link: start over
      this.ws = null;
      this.scheduleReconnect();
    } else if (quiet > PING_EVERY_MS) {
      this.send({ op: 'ping' });
    }
  }

  /**
   * The thread on screen (null when none is visible); sent now and after every reconnect (the
   * server keeps it fresh while the connection lives, and drops it when the connection goes).
   */
  setFocus(threadId) {
    if (threadId === this.focusThread) return;
    this.focusThread = threadId;
    this.sendFocus();
  }

  sendFocus() {
    this.send({ op: 'focus', thread_id: this.focusThread });
  }

  send(frame) {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(frame));
  }

  setStatus(status, info) {
    this.status = status;
    this.handlers.onStatus(status, info || {});
  }
}
