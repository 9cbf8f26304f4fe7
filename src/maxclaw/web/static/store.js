// The client's copy of the records it may see: threads, messages, decisions, each held at its
// latest rev. Frames and REST pages both go through upsert(); a record whose rev is not newer
// than the one held is ignored (the WebSocket may repeat frames, REST may race them).

export class Store {
  constructor() {
    this.threads = new Map();
    this.messages = new Map();
    this.decisions = new Map();
    this.toolRows = new Map(); // `${thread_id}|${tool_call_id}` -> tool message (the card's state)
    this.byThread = new Map(); // thread id -> {rows: Map(id -> message), sorted: [] | null}
    this.definitions = new Map(); // component id -> its definition (from assistant rows)
    this.listeners = new Set();
  }

  /** Keep `record` if it is newer than what is held; returns whether it was kept. */
  upsert(table, record) {
    const map = this[table];
    if (!(map instanceof Map) || !record || record.id === undefined) return false;
    const held = map.get(record.id);
    if (held && Number(held.rev) >= Number(record.rev)) return false;
    map.set(record.id, record);
    if (table === 'messages') this.indexMessage(record);
    for (const listener of this.listeners) listener(table, record);
    return true;
  }

  // Indexes, so a render costs the shown thread, not every message ever received.
  indexMessage(message) {
    let thread = this.byThread.get(message.thread_id);
    if (!thread) {
      thread = { rows: new Map(), sorted: null };
      this.byThread.set(message.thread_id, thread);
    }
    if (!thread.rows.has(message.id)) thread.sorted = null;
    else if (thread.sorted) thread.sorted = thread.sorted.map((m) => (m.id === message.id ? message : m));
    thread.rows.set(message.id, message);
    if (message.role === 'tool' && message.tool_call_id) {
      this.toolRows.set(`${message.thread_id}|${message.tool_call_id}`, message);
    }
    for (const def of message.components || []) this.definitions.set(def.id, def);
  }

  onChange(listener) {
    this.listeners.add(listener);
  }

  /** The tool row holding the states of the card posted by `toolCallId` in that thread. */
  toolRow(threadId, toolCallId) {
    return this.toolRows.get(`${threadId}|${toolCallId}`) || null;
  }

  /** The thread's messages in id order. */
  messagesOf(threadId) {
    const thread = this.byThread.get(threadId);
    if (!thread) return [];
    if (!thread.sorted) thread.sorted = [...thread.rows.values()].sort((a, b) => a.id - b.id);
    return thread.sorted;
  }

  /** The panel: open decisions, and answers Main gave that Max has not dismissed yet. */
  /** Open decisions, Main's answers not dismissed, and those in `kept` (answered here just now). */
  panelDecisions(kept = new Set()) {
    return [...this.decisions.values()]
      .filter((d) => d.status === 'open' || (d.answered_by_main && !d.dismissed_at) || kept.has(d.id))
      .sort((a, b) => b.id - a.id);
  }

  openDecisions() {
    return [...this.decisions.values()]
      .filter((d) => d.status === 'open')
      .sort((a, b) => b.id - a.id);
  }

  clear() {
    this.threads.clear();
    this.messages.clear();
    this.decisions.clear();
    this.toolRows.clear();
    this.byThread.clear();
    this.definitions.clear();
  }
}
