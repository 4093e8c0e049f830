/**
 * The apply path's bookkeeping, no I/O of its own: `ApplyLoop` keeps the
 * committed cursor and applies what arrives in seq order, exactly once;
 * `Acker` batches the `ack` frames that report it.
 *
 * What the loop applies is an event (`seq`) or a stretch the server skipped
 * (a `compacted` frame: `seq` is its first seq, `last` its last): applying
 * either moves the cursor to its last seq, so contiguity holds and nothing
 * is applied twice.
 *
 * @module apply
 */

import * as P from "../wire/constants.js";
import { realTimers } from "./timers.js";

/**
 * Applies events (and skipped stretches) in seq order, exactly once each.
 */
export class ApplyLoop {
  /**
   * @param {object} options
   * @param {number} [options.cursor=0] the committed cursor to start from
   * @param {(event: object) => void} options.apply render one event (synchronously)
   * @param {(frame: object) => void} options.send write a frame (here: `sync`)
   * @param {(seq: number, event: object) => void} [options.onCommit] after the cursor moved to seq
   * @param {(err: unknown, event: object) => void} [options.onError] `apply` threw
   * @param {() => number} [options.now]
   * @param {() => string} [options.requestId]
   * @param {number} [options.minSyncIntervalMs=1000]
   * @param {number} [options.syncTimeoutMs=5000]
   */
  constructor({
    cursor = 0,
    apply,
    send,
    onCommit = () => {},
    onError = (err) => console.error(err),
    now = Date.now,
    requestId,
    minSyncIntervalMs = 1000,
    syncTimeoutMs = 5000,
  }) {
    this._cursor = cursor;
    this._apply = apply;
    this._send = send;
    this._onCommit = onCommit;
    this._onError = onError;
    this._now = now;
    let n = 0;
    this._requestId = requestId || (() => `sync-${++n}`);
    this.minSyncIntervalMs = minSyncIntervalMs;
    this.syncTimeoutMs = syncTimeoutMs;
    /** held events by seq, and held stretches by their first seq */
    this._held = new Map();
    this._heldStretches = new Map();
    this._gen = 0;
    this._syncInFlight = false;
    this._syncSentAt = -Infinity;
    this._syncTarget = null;
    this.stats = { applied: 0, duplicates: 0, held: 0, syncs: 0 };
  }

  /** @returns {number} the highest contiguous seq applied */
  get cursor() {
    return this._cursor;
  }

  /** @returns {number} how many events wait for a gap to be filled */
  get heldCount() {
    return this._held.size + this._heldStretches.size;
  }

  /** @returns {boolean} whether a `sync` is awaiting its `sync_ok` */
  get syncInFlight() {
    return this._syncInFlight;
  }

  /**
   * Start over on a new socket (or from another cursor): held events and sync
   * state are dropped; anything in progress stops.
   * @param {number} [cursor] a new committed cursor (default: keep)
   */
  reset(cursor = this._cursor) {
    this._cursor = cursor;
    this._held.clear();
    this._heldStretches.clear();
    this._gen += 1;
    this._syncInFlight = false;
    this._syncTarget = null;
    this._syncSentAt = -Infinity;
  }

  /**
   * One `event` frame from the socket, or a skipped stretch (`last`: its
   * last seq; see `compactedItem`).
   * @param {{seq: number, last?: number}} event
   * @returns {"applied"|"duplicate"|"held"}
   */
  receive(event) {
    const seq = event.seq;
    if (!Number.isInteger(seq) || lastOf(event) <= this._cursor) {
      this.stats.duplicates += 1;
      return "duplicate";
    }
    // A stretch that began at or before the cursor still moves it past its end.
    if (seq <= this._cursor + 1) {
      const gen = this._gen;
      this._applyOne(event);
      if (gen === this._gen) this._drain(gen);
      if (gen === this._gen) this._maybeSync();
      return "applied";
    }
    // Events and stretches wait apart: an event is found by its seq at once,
    // a stretch (rare) by a scan of the few held.
    const held = lastOf(event) > seq ? this._heldStretches : this._held;
    const already = held.get(seq);
    if (already === undefined || lastOf(event) > lastOf(already)) {
      held.set(seq, event);
      this.stats.held += 1;
    }
    this._maybeSync();
    return "held";
  }

  _applyOne(event) {
    try {
      this._apply(event);
    } catch (err) {
      // A display bug must not wedge the session forever: report and move on.
      this._onError(err, event);
    }
    const jumped = lastOf(event) > event.seq;
    this._cursor = lastOf(event);
    if (jumped) {
      // Held events the stretch covered will never be applied: forget them.
      for (const seq of this._held.keys()) if (seq <= this._cursor) this._held.delete(seq);
    }
    this.stats.applied += 1;
    this._onCommit(this._cursor, event);
  }

  _drain(gen) {
    while (gen === this._gen) {
      const want = this._cursor + 1;
      let next = this._held.get(want);
      if (next !== undefined) {
        this._held.delete(want);
      } else {
        next = this._nextStretch();
        if (next === null) return;
      }
      this._applyOne(next);
    }
  }

  /** A held stretch that starts at or before the cursor + 1 and ends past it (taken out), or null. */
  _nextStretch() {
    for (const [seq, held] of this._heldStretches) {
      if (lastOf(held) <= this._cursor) {
        this._heldStretches.delete(seq);
      } else if (seq <= this._cursor + 1) {
        this._heldStretches.delete(seq);
        return held;
      }
    }
    return null;
  }

  _maybeSync() {
    if (this.heldCount === 0) {
      this._syncTarget = null;
      return;
    }
    if (this._syncInFlight) return;
    // A previous sync's replay is still on its way: wait for it.
    if (this._syncTarget !== null && this._cursor < this._syncTarget) return;
    if (this._now() - this._syncSentAt < this.minSyncIntervalMs) return;
    this._syncInFlight = true;
    this._syncSentAt = this._now();
    this._syncTarget = null;
    this.stats.syncs += 1;
    this._send({ type: P.SYNC, request_id: this._requestId(), after: this._cursor });
  }

  /**
   * The server answered our `sync`; the events up to `head` follow.
   * @param {{head: number}} frame
   */
  onSyncOk(frame) {
    this._syncInFlight = false;
    this._syncTarget = Number.isInteger(frame.head) ? frame.head : null;
  }

  /** The server refused our `sync` (it should not): allow another one later. */
  onSyncError() {
    this._syncInFlight = false;
    this._syncTarget = null;
  }

  /** Periodic check: re-sync a gap that a sync did not fill, or a lost sync. */
  tick() {
    if (this._syncInFlight && this._now() - this._syncSentAt >= this.syncTimeoutMs) {
      this._syncInFlight = false;
      this._syncTarget = null;
    }
    if (this._syncTarget !== null && this._now() - this._syncSentAt >= this.syncTimeoutMs) {
      this._syncTarget = null;
    }
    this._maybeSync();
  }
}

/**
 * The last seq an applied item covers: its own, or a stretch's last.
 * @param {{seq: number, last?: number}} item
 * @returns {number}
 */
function lastOf(item) {
  return Number.isInteger(item.last) && item.last > item.seq ? item.last : item.seq;
}

/**
 * What the loop applies for a `compacted` frame: the stretch `from..to`, whose
 * superseded deltas belong to `run_id`'s text (its message follows).
 * @param {{from: number, to: number, run_id?: string|null, session_id?: string}} frame
 * @returns {{type: string, seq: number, last: number, run_id: string|null}|null} null if malformed
 */
export function compactedItem(frame) {
  const { from, to } = frame;
  if (!Number.isInteger(from) || !Number.isInteger(to) || from < 1 || to < from) return null;
  return { type: P.COMPACTED, seq: from, last: to, run_id: typeof frame.run_id === "string" ? frame.run_id : null };
}

/**
 * Batched acks: at most one `ack` per `intervalMs`, sooner once `maxEvents`
 * events are unacknowledged (but never faster than every `minGapMs`).
 */
export class Acker {
  /**
   * @param {object} options
   * @param {(frame: object) => boolean|void} options.send
   * @param {typeof realTimers} [options.timers]
   * @param {() => number} [options.now]
   * @param {number} [options.intervalMs=250]
   * @param {number} [options.maxEvents=50]
   * @param {number} [options.minGapMs=100]
   */
  constructor({ send, timers = realTimers, now = Date.now, intervalMs = 250, maxEvents = 50, minGapMs = 100 }) {
    this._send = send;
    this._timers = timers;
    this._now = now;
    this.intervalMs = intervalMs;
    this.maxEvents = maxEvents;
    this.minGapMs = minGapMs;
    this.reset();
  }

  /** A new socket: nothing acknowledged on it yet, nothing pending. */
  reset() {
    this.cancel();
    this.acked = 0;
    this.pending = 0;
    this.count = 0;
    this.lastSentAt = -Infinity;
  }

  /**
   * The cursor was committed up to `seq`.
   * @param {number} seq
   */
  note(seq) {
    this.pending = Math.max(this.pending, seq);
    this.count += 1;
    if (this.count >= this.maxEvents && this._now() - this.lastSentAt >= this.minGapMs) {
      this.flush();
      return;
    }
    if (this._timer == null) {
      this._timer = this._timers.setTimeout(() => {
        this._timer = null;
        this.flush();
      }, this.intervalMs);
    }
  }

  /** Send the ack now if anything is unacknowledged. */
  flush() {
    if (this._timer != null) this._timers.clearTimeout(this._timer);
    this._timer = null;
    if (this.pending <= this.acked) return;
    this.acked = this.pending;
    this.count = 0;
    this.lastSentAt = this._now();
    this._send({ type: P.ACK, seq: this.pending });
  }

  /** Forget the pending ack (the socket is gone). */
  cancel() {
    if (this._timer != null) this._timers.clearTimeout(this._timer);
    this._timer = null;
    this.count = 0;
  }
}
