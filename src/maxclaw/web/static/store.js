// The client's copy of the records it may see: threads, messages, decisions, each held at its
// latest rev. Frames and REST pages both go through upsert(); a record whose rev is not newer
// than the one held is ignored (the WebSocket may repeat frames, REST may race them).

export class Store {
  constructor() {
    this.threads = new Map();
    this.messages = new Map();
    this.decisions = new Map();
    this.toolRows = new Map(); // `${thread_id}|${tool_call_id}` -> tool message (the card's state)
    this.listeners = new Set();
  }

  /** Keep `record` if it is newer than what is held; returns whether it was kept. */
  upsert(table, record) {
    const map = this[table];
    if (!(map instanceof Map) || !record || record.id === undefined) return false;
    const held = map.get(record.id);
    if (held && Number(held.rev) >= Number(record.rev)) return false;
    map.set(record.id, record);
    if (table === 'messages' && record.role === 'tool' && record.tool_call_id) {
      this.toolRows.set(`${record.thread_id}|${record.tool_call_id}`, record);
    }
    for (const listener of this.listeners) listener(table, record);
    return true;
  }

  onChange(listener) {
    this.listeners.add(listener);
  }

  /** The tool row holding the states of the card posted by `toolCallId` in that thread. */
  toolRow(threadId, toolCallId) {
    return this.toolRows.get(`${threadId}|${toolCallId}`) || null;
  }

  messagesOf(threadId) {
    const out = [];
    for (const message of this.messages.values()) {
      if (message.thread_id === threadId) out.push(message);
    }
    return out.sort((a, b) => a.id - b.id);
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
  }
}
