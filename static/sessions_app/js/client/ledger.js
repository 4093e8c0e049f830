/**
 * The send ledger: every user input from the moment it is typed until the
 * server has it, so an input is never lost and never sent twice.
 *
 *   prepared  -> its client_message_id is made and stored; not yet written
 *   sent      -> written to a socket at least once; the answer is unknown
 *   confirmed -> the server has it: `send_ok`, or a `user.message` event
 *                carrying the id (also one that another tab caused)
 *   failed    -> the server refused it for good (e.g. `too_large`); kept for
 *                the person to see and discard, never re-sent
 *
 * After a reconnect the client resumes, applies the replay (which confirms
 * whatever got through), then re-sends `unconfirmed()` with the same ids; the
 * server answers a repeated id with `duplicate` and appends nothing.
 *
 * @module ledger
 */

import { randomId } from "../model/timers.js";

export const PREPARED = "prepared";
export const SENT = "sent";
export const CONFIRMED = "confirmed";
export const FAILED = "failed";

const STATES = new Set([PREPARED, SENT, CONFIRMED, FAILED]);

/** @returns {string} a fresh client_message_id */
export function newClientMessageId() {
  return randomId("m");
}

/**
 * @typedef {object} LedgerEntry
 * @property {string} id        the client_message_id
 * @property {string} text
 * @property {string} state     prepared | sent | confirmed | failed
 * @property {number} created   ms since epoch
 * @property {number} attempts  how many times it was written to a socket
 * @property {number} [seq]     seq of its user.message, once known
 * @property {string} [run_id]
 * @property {string} [status]  send_ok status: started | queued | duplicate
 * @property {string} [error]   error code when failed
 * @property {string} [message] error message when failed
 * @property {boolean} [interrupt] "stop and send": stop the active run for it
 * @property {string} [regenerate] a regenerate of this run's answer (no text)
 * @property {string} [editOf] a new version of this run's message
 */

export class Ledger {
  /**
   * @param {Array<LedgerEntry>} [entries] entries restored from storage
   * @param {object} [options]
   * @param {(entries: Array<LedgerEntry>) => void} [options.persist] called
   *   synchronously after every change, with a copy of all entries
   * @param {() => string} [options.newId]
   * @param {() => number} [options.now]
   */
  constructor(entries = [], { persist = () => {}, newId = newClientMessageId, now = Date.now } = {}) {
    this._persist = persist;
    this._newId = newId;
    this._now = now;
    /** @type {Array<LedgerEntry>} */
    this._entries = [];
    const seen = new Set();
    for (const e of entries) {
      if (!e || typeof e.id !== "string" || typeof e.text !== "string" || seen.has(e.id)) continue;
      if (!STATES.has(e.state)) continue;
      seen.add(e.id);
      this._entries.push({ attempts: 0, created: 0, ...e });
    }
  }

  _save() {
    this._persist(this.entries());
  }

  /** @returns {Array<LedgerEntry>} copies, oldest first */
  entries() {
    return this._entries.map((e) => ({ ...e }));
  }

  /**
   * @param {string} id
   * @returns {LedgerEntry|undefined} a copy
   */
  get(id) {
    const e = this._find(id);
    return e ? { ...e } : undefined;
  }

  _find(id) {
    return this._entries.find((e) => e.id === id);
  }

  /**
   * Record a new input: its id is made and persisted before anything is sent.
   * @param {string} text
   * @param {{interrupt?: boolean, regenerate?: string, editOf?: string}} [options]
   *   kept for every re-send: "stop and send", a regenerate, an edit (see LedgerEntry)
   * @returns {LedgerEntry} a copy of the new entry (state "prepared")
   */
  prepare(text, { interrupt = false, regenerate = null, editOf = null } = {}) {
    const entry = { id: this._newId(), text, state: PREPARED, created: this._now(), attempts: 0 };
    if (interrupt) entry.interrupt = true;
    if (regenerate) entry.regenerate = regenerate;
    if (editOf) entry.editOf = editOf;
    this._entries.push(entry);
    this._save();
    return { ...entry };
  }

  /**
   * The entry was written to a socket. Only prepared/sent entries move.
   * @param {string} id
   * @returns {boolean} whether the entry exists and is unconfirmed
   */
  markSent(id) {
    const e = this._find(id);
    if (!e || (e.state !== PREPARED && e.state !== SENT)) return false;
    e.state = SENT;
    e.attempts += 1;
    this._save();
    return true;
  }

  /**
   * The server has the input (send_ok, or its user.message event). Final:
   * a confirmed entry never goes back. Also confirms a failed entry, since the
   * log is the truth.
   * @param {string} id
   * @param {{seq?: number, run_id?: string, status?: string}} [info]
   * @returns {boolean} whether anything changed
   */
  confirm(id, info = {}) {
    const e = this._find(id);
    if (!e) return false;
    let changed = false;
    if (e.state !== CONFIRMED) {
      e.state = CONFIRMED;
      delete e.error;
      delete e.message;
      changed = true;
    }
    for (const k of ["seq", "run_id", "status"]) {
      if (info[k] != null && e[k] == null) {
        e[k] = info[k];
        changed = true;
      }
    }
    if (changed) this._save();
    return changed;
  }

  /**
   * The server refused the input for good; it will not be re-sent.
   * @param {string} id
   * @param {string} code
   * @param {string} [message]
   * @returns {boolean}
   */
  fail(id, code, message = "") {
    const e = this._find(id);
    if (!e || e.state === CONFIRMED) return false;
    e.state = FAILED;
    e.error = code;
    e.message = message;
    this._save();
    return true;
  }

  /**
   * Remove an entry the person no longer wants (a failed one); confirmed
   * entries are removed by `prune`, unconfirmed ones cannot be discarded
   * because they may already be on the server.
   * @param {string} id
   * @returns {boolean}
   */
  discard(id) {
    const i = this._entries.findIndex((e) => e.id === id);
    if (i < 0 || this._entries[i].state !== FAILED) return false;
    this._entries.splice(i, 1);
    this._save();
    return true;
  }

  /** @returns {Array<LedgerEntry>} prepared and sent entries, oldest first (copies) */
  unconfirmed() {
    return this._entries.filter((e) => e.state === PREPARED || e.state === SENT).map((e) => ({ ...e }));
  }

  /**
   * Drop confirmed entries that the transcript already shows: from then on the
   * transcript is their record.
   * @param {(id: string) => boolean} isRendered
   * @returns {boolean} whether anything was removed
   */
  prune(isRendered) {
    const before = this._entries.length;
    this._entries = this._entries.filter((e) => !(e.state === CONFIRMED && isRendered(e.id)));
    if (this._entries.length !== before) {
      this._save();
      return true;
    }
    return false;
  }
}
