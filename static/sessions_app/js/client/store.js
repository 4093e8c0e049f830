/**
 * Per-tab persistence in sessionStorage (never localStorage, never `storage`
 * events: tabs converge through the server, not through storage).
 *
 * Keys (prefix "agent"):
 *   agent.tab               this tab's id
 *   agent.s.<session_id>    {v, session_id, epoch, cursor, model}: the committed
 *                           cursor and the transcript it describes, written
 *                           together by `commit()`, the only writer, so they
 *                           can never disagree
 *   agent.l.<session_id>    the send ledger (see ledger.js)
 *
 * @module store
 */

import { randomId } from "../model/timers.js";

export const STORE_VERSION = 1;

/**
 * The most characters one session's snapshot may take. sessionStorage holds
 * about 5 million characters per origin, shared by every session the tab
 * opened; a snapshot past this is not stored at all: a refresh then reloads
 * the session from the server (a compacted replay, well under a second),
 * which is slower than the cache but never wrong.
 */
export const MAX_SNAPSHOT_CHARS = 2_000_000;

/** An in-memory stand-in with the Storage API (when sessionStorage is unavailable). */
export class MemoryStorage {
  constructor() {
    this._map = new Map();
  }
  get length() {
    return this._map.size;
  }
  key(i) {
    return Array.from(this._map.keys())[i] ?? null;
  }
  getItem(k) {
    return this._map.has(k) ? this._map.get(k) : null;
  }
  setItem(k, v) {
    this._map.set(String(k), String(v));
  }
  removeItem(k) {
    this._map.delete(k);
  }
  clear() {
    this._map.clear();
  }
}

export class SessionStore {
  /**
   * @param {Storage} storage sessionStorage, or a fake with the same API
   * @param {object} [options]
   * @param {string} [options.prefix="agent"]
   * @param {(err: unknown) => void} [options.onError] storage failures (quota, ...)
   * @param {number} [options.maxSnapshotChars] see MAX_SNAPSHOT_CHARS
   */
  constructor(storage, { prefix = "agent", onError = () => {}, maxSnapshotChars = MAX_SNAPSHOT_CHARS } = {}) {
    this.storage = storage;
    this.prefix = prefix;
    this.onError = onError;
    this.maxSnapshotChars = maxSnapshotChars;
  }

  _cacheKey(sessionId) {
    return `${this.prefix}.s.${sessionId}`;
  }

  _ledgerKey(sessionId) {
    return `${this.prefix}.l.${sessionId}`;
  }

  _read(key) {
    try {
      const raw = this.storage.getItem(key);
      return raw == null ? null : JSON.parse(raw);
    } catch (err) {
      this.onError(err);
      return null;
    }
  }

  _remove(key) {
    try {
      this.storage.removeItem(key);
    } catch (err) {
      this.onError(err);
    }
  }

  /**
   * This tab's id, made once and kept for the tab's life.
   *
   * A tab opened with window.open() or "Duplicate tab" starts with a copy of
   * its opener's sessionStorage, tab id included. `contextMarker` tells the two
   * apart: pass an object with a `name` property that survives navigations of
   * this tab but is not copied to others (window works: window.name).
   * @param {{name: string}} [contextMarker]
   * @returns {string}
   */
  tabId(contextMarker) {
    const key = `${this.prefix}.tab`;
    let id = null;
    try {
      id = this.storage.getItem(key);
    } catch (err) {
      this.onError(err);
    }
    const tag = (value) => `${this.prefix}-tab:${value}`;
    if (id && contextMarker && contextMarker.name !== tag(id)) {
      // A copied sessionStorage: this is another tab, it needs its own id.
      id = null;
    }
    if (!id) {
      id = randomId("t").slice(0, 64);
      try {
        this.storage.setItem(key, id);
      } catch (err) {
        this.onError(err);
      }
    }
    if (contextMarker) contextMarker.name = tag(id);
    return id;
  }

  /**
   * The committed snapshot of a session, or null when there is none or it is
   * unusable (wrong version, inconsistent fields).
   * @param {string} sessionId
   * @returns {{epoch: string|null, cursor: number, model: object}|null}
   */
  load(sessionId) {
    const key = this._cacheKey(sessionId);
    const snap = this._read(key);
    if (snap == null) return null;
    const ok =
      typeof snap === "object" &&
      snap.v === STORE_VERSION &&
      snap.session_id === sessionId &&
      Number.isInteger(snap.cursor) &&
      snap.cursor >= 0 &&
      (snap.cursor === 0 || (typeof snap.epoch === "string" && snap.epoch !== "")) &&
      snap.model &&
      typeof snap.model === "object";
    if (!ok) {
      this._remove(key);
      return null;
    }
    return { epoch: snap.epoch ?? null, cursor: snap.cursor, model: snap.model };
  }

  /**
   * THE writer of a session's cursor and transcript: both in one key, in one
   * setItem, so a reader sees either the old pair or the new one.
   *
   * When storage is full, other sessions' caches are evicted first; if it
   * still fails, or the snapshot is larger than `maxSnapshotChars`, this
   * session's cache is removed (a refresh then replays from 0, which is
   * slower but never wrong).
   * @param {string} sessionId
   * @param {{epoch: string|null, cursor: number, model: object}} snapshot
   * @returns {boolean} whether the snapshot was stored
   */
  commit(sessionId, { epoch, cursor, model }) {
    const key = this._cacheKey(sessionId);
    const raw = JSON.stringify({ v: STORE_VERSION, session_id: sessionId, epoch, cursor, model });
    if (raw.length > this.maxSnapshotChars) {
      this._remove(key);
      return false;
    }
    try {
      this.storage.setItem(key, raw);
      return true;
    } catch (err) {
      this.onError(err);
    }
    this._evictOthers(sessionId);
    try {
      this.storage.setItem(key, raw);
      return true;
    } catch (err) {
      this.onError(err);
      this._remove(key);
      return false;
    }
  }

  _evictOthers(sessionId) {
    const mine = sessionId == null ? null : this._cacheKey(sessionId);
    const doomed = [];
    try {
      for (let i = 0; i < this.storage.length; i++) {
        const k = this.storage.key(i);
        if (k?.startsWith(`${this.prefix}.s.`) && k !== mine) doomed.push(k);
      }
    } catch (err) {
      this.onError(err);
    }
    for (const k of doomed) this._remove(k);
  }

  /**
   * Forget this tab's cached transcript of a session (the ledger stays).
   * @param {string} sessionId
   */
  drop(sessionId) {
    this._remove(this._cacheKey(sessionId));
  }

  /**
   * @param {string} sessionId
   * @returns {Array<object>} the stored ledger entries ([] when none)
   */
  loadLedger(sessionId) {
    const data = this._read(this._ledgerKey(sessionId));
    return Array.isArray(data) ? data : [];
  }

  /**
   * @param {string} sessionId
   * @param {Array<object>} entries
   * @returns {boolean}
   */
  saveLedger(sessionId, entries) {
    const key = this._ledgerKey(sessionId);
    if (entries.length === 0) {
      this._remove(key);
      return true;
    }
    const raw = JSON.stringify(entries);
    try {
      this.storage.setItem(key, raw);
      return true;
    } catch (err) {
      this.onError(err);
    }
    // The ledger matters more than any cached transcript: make room.
    this._evictOthers(null);
    try {
      this.storage.setItem(key, raw);
      return true;
    } catch (err) {
      this.onError(err);
      return false;
    }
  }
}

/**
 * Writes a session's snapshot shortly after it changes (once per `delayMs`,
 * not once per event), or at once (`now`: page hide, a close, a handshake).
 */
export class Persister {
  /**
   * @param {object} options
   * @param {SessionStore} options.store
   * @param {string} options.sessionId
   * @param {import("../model/timers.js").Timers} options.timers
   * @param {number} options.delayMs
   * @param {() => ({epoch: string|null, cursor: number, model: object}|null)} options.snapshot null: nothing worth storing
   */
  constructor({ store, sessionId, timers, delayMs, snapshot }) {
    this.store = store;
    this.sessionId = sessionId;
    this.timers = timers;
    this.delayMs = delayMs;
    this.snapshot = snapshot;
    this._timer = null;
  }

  soon() {
    if (this._timer !== null) return;
    this._timer = this.timers.setTimeout(() => {
      this._timer = null;
      this.now();
    }, this.delayMs);
  }

  now() {
    if (this._timer !== null) this.timers.clearTimeout(this._timer);
    this._timer = null;
    const snapshot = this.snapshot();
    if (snapshot !== null) this.store.commit(this.sessionId, snapshot);
  }
}
