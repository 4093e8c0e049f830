// Test doubles shared by the client tests: a fake clock, a fake WebSocket and
// a fake sessionStorage. No npm dependencies.
import assert from "node:assert/strict";

export class FakeClock {
  constructor(start = 1_000_000) {
    this.t = start;
    this.nextId = 1;
    this.timers = new Map(); // id -> {at, fn, every}
    this.now = () => this.t;
    this.setTimeout = (fn, ms) => this._add(fn, ms, null);
    this.clearTimeout = (id) => this.timers.delete(id);
    this.setInterval = (fn, ms) => this._add(fn, ms, Math.max(1, ms));
    this.clearInterval = (id) => this.timers.delete(id);
  }

  _add(fn, ms, every) {
    const id = this.nextId++;
    this.timers.set(id, { at: this.t + Math.max(0, ms || 0), fn, every });
    return id;
  }

  /** Run every timer due within `ms`, in time order. */
  advance(ms) {
    const end = this.t + ms;
    for (;;) {
      let best = null;
      for (const [id, timer] of this.timers) {
        if (timer.at <= end && (!best || timer.at < best[1].at || (timer.at === best[1].at && id < best[0]))) best = [id, timer];
      }
      if (!best) break;
      const [id, timer] = best;
      this.t = Math.max(this.t, timer.at);
      if (timer.every) timer.at += timer.every;
      else this.timers.delete(id);
      timer.fn();
    }
    this.t = end;
  }
}

export class FakeStorage {
  constructor({ quota = Infinity } = {}) {
    this.map = new Map();
    this.quota = quota;
    this.writes = [];
  }
  get length() {
    return this.map.size;
  }
  key(i) {
    return Array.from(this.map.keys())[i] ?? null;
  }
  getItem(k) {
    return this.map.has(k) ? this.map.get(k) : null;
  }
  setItem(k, v) {
    v = String(v);
    let size = v.length + k.length;
    for (const [key, val] of this.map) if (key !== k) size += key.length + val.length;
    if (size > this.quota) {
      const err = new Error("QuotaExceededError");
      err.name = "QuotaExceededError";
      throw err;
    }
    this.writes.push(k);
    this.map.set(k, v);
  }
  removeItem(k) {
    this.map.delete(k);
  }
  clear() {
    this.map.clear();
  }
}

/** A WebSocket double: every instance is recorded; the test drives it. */
export function makeFakeWebSocket() {
  const sockets = [];
  class FakeWebSocket {
    static CONNECTING = 0;
    static OPEN = 1;
    static CLOSING = 2;
    static CLOSED = 3;
    constructor(url) {
      this.url = url;
      this.readyState = 0;
      this.sent = [];
      this.closedWith = null;
      this.onopen = this.onmessage = this.onerror = this.onclose = null;
      sockets.push(this);
    }
    send(data) {
      if (this.readyState !== 1) throw new Error("send on a socket that is not open");
      this.sent.push(JSON.parse(data));
    }
    close(code, reason) {
      this.closedWith = { code, reason };
      this.readyState = 3;
    }
    // --- driven by tests ---
    open() {
      this.readyState = 1;
      this.onopen?.({});
    }
    receive(frame) {
      this.onmessage?.({ data: JSON.stringify(frame) });
    }
    serverClose(code = 1006, reason = "") {
      this.readyState = 3;
      this.onclose?.({ code, reason, wasClean: code !== 1006 });
    }
    framesOf(type) {
      return this.sent.filter((f) => f.type === type);
    }
  }
  return { FakeWebSocket, sockets };
}

/** An event frame. */
export function ev(seq, kind = "assistant.delta", data = { text: `t${seq} ` }, run_id = "run_1", session_id = "s_1") {
  return { type: "event", session_id, seq, kind, run_id, ts: "2026-01-01T00:00:00.000Z", data };
}

/**
 * Every "from>to" step seen is a move `table` declares.
 * @param {string[]} seen
 * @param {Record<string, string[]>} table
 */
export function assertDeclared(seen, table) {
  for (const step of seen) {
    const [from, to] = step.split(">");
    assert.ok(table[from].includes(to), step);
  }
}
