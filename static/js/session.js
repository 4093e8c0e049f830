/**
 * Session state and the apply loop: what a tab knows about one session and how
 * events get from the socket into the display, in order, exactly once.
 *
 * - `ApplyLoop`: the committed cursor; ignores seq <= cursor, holds events
 *   after a gap and asks for the missing ones with `sync`, applies in order and
 *   advances the cursor only after an event is applied.
 * - `Acker`: batched `ack` frames for the committed cursor.
 * - `SessionClient`: the handshake (`resume` after the cursor), the replay,
 *   the send ledger, approvals, cancel, rejections, persistence.
 *
 * None of this touches the DOM: the display is a `view` object (ui.js in the
 * browser, a recorder in tests).
 *
 * @module session
 */

import * as P from "./constants.js";
import { Ledger } from "./ledger.js";
import { realTimers } from "./socket.js";
import { activeRun, applyEvent, emptyModel, hasUserMessage, isModel } from "./transcript.js";

/** Connection states shown to the person (and in `data-state`). */
export const STATE = Object.freeze({
  CONNECTING: "connecting",
  RESUMING: "resuming",
  LIVE: "live",
  RECONNECTING: "reconnecting",
  REJECTED: "rejected",
});

/** `data-reason` values for fatal closes (resume rejections use the protocol's reasons). */
export const REASON_NOT_AUTHENTICATED = "not_authenticated";
/** How long after an `internal_error` a send, decide or cancel goes again. */
export const RETRY_AFTER_INTERNAL_ERROR_MS = 1000;
export const REASON_PROTOCOL_VIOLATION = "protocol_violation";

/**
 * Applies events in seq order, exactly once each.
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
    /** @type {Map<number, object>} */
    this._held = new Map();
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
    return this._held.size;
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
    this._gen += 1;
    this._syncInFlight = false;
    this._syncTarget = null;
    this._syncSentAt = -Infinity;
  }

  /**
   * One `event` frame from the socket.
   * @param {{seq: number}} event
   * @returns {"applied"|"duplicate"|"held"}
   */
  receive(event) {
    const seq = event.seq;
    if (!Number.isInteger(seq) || seq <= this._cursor) {
      this.stats.duplicates += 1;
      return "duplicate";
    }
    if (seq === this._cursor + 1) {
      const gen = this._gen;
      this._applyOne(event);
      if (gen === this._gen) this._drain(gen);
      if (gen === this._gen) this._maybeSync();
      return "applied";
    }
    if (!this._held.has(seq)) {
      this._held.set(seq, event);
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
    this._cursor = event.seq;
    this.stats.applied += 1;
    this._onCommit(event.seq, event);
  }

  _drain(gen) {
    for (const seq of Array.from(this._held.keys())) {
      if (seq <= this._cursor) this._held.delete(seq);
    }
    while (gen === this._gen && this._held.has(this._cursor + 1)) {
      const next = this._held.get(this._cursor + 1);
      this._held.delete(this._cursor + 1);
      this._applyOne(next);
    }
  }

  _maybeSync() {
    if (this._held.size === 0) {
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

/**
 * A view that ignores everything; the interface `SessionClient` drives.
 * @type {object}
 */
export const NULL_VIEW = {
  reset(_model, _cursor) {},
  applyChanges(_changes, _model) {},
  setCursor(_cursor) {},
  setLedger(_entries, _model) {},
  setConnection(_state, _detail) {},
  setPresence(_presence) {},
  setBusy(_kind, _id, _busy) {},
  notify(_message, _level) {},
};

/**
 * A view with every method of NULL_VIEW: the given object's where it has one.
 * @param {object} view
 * @returns {object}
 */
function completeView(view) {
  const out = {};
  for (const name of Object.keys(NULL_VIEW)) {
    out[name] = view && typeof view[name] === "function" ? view[name].bind(view) : NULL_VIEW[name];
  }
  return out;
}

/**
 * One tab's view of one session: the cursor and transcript (restored from the
 * store), the send ledger, the handshake and everything after it.
 */
export class SessionClient {
  /**
   * @param {object} options
   * @param {string} options.sessionId
   * @param {string} options.tabId
   * @param {import("./store.js").SessionStore} options.store
   * @param {(handlers: import("./socket.js").ConnectionHandlers) => import("./socket.js").Connection} options.createConnection
   * @param {object} [options.view] see NULL_VIEW for the interface
   * @param {typeof realTimers} [options.timers]
   * @param {() => number} [options.now]
   * @param {{take: (name: string) => boolean}|null} [options.hooks] test failpoints
   * @param {number} [options.persistDelayMs=250]
   */
  constructor({ sessionId, tabId, store, createConnection, view = NULL_VIEW, timers = realTimers, now = Date.now, hooks = null, persistDelayMs = 250 }) {
    this.sessionId = sessionId;
    this.tabId = tabId;
    this.store = store;
    this.view = completeView(view);
    this.timers = timers;
    this.now = now;
    this.hooks = hooks;
    this.persistDelayMs = persistDelayMs;

    const cached = store.load(sessionId);
    const usable = cached && isModel(cached.model);
    if (cached && !usable) store.drop(sessionId);
    this.epoch = usable ? cached.epoch : null;
    this.model = usable ? cached.model : emptyModel();

    this.ledger = new Ledger(store.loadLedger(sessionId), {
      persist: (entries) => store.saveLedger(sessionId, entries),
      now,
    });
    this._rid = 0;
    this.loop = new ApplyLoop({
      cursor: usable ? cached.cursor : 0,
      apply: (ev) => this._applyEvent(ev),
      send: (frame) => {
        this.requests.set(frame.request_id, { type: P.SYNC, id: null });
        this._send(frame);
      },
      onCommit: (seq, ev) => this._onCommit(seq, ev),
      now,
      requestId: () => this._requestId(),
    });
    this.acker = new Acker({ send: (frame) => this._send(frame), timers, now });

    this.state = STATE.CONNECTING;
    this.stateDetail = {};
    this.handshake = "none"; // none | pending | ok
    this.replayHead = null;
    this.everLive = false;
    this.rejection = null;
    this.presence = { viewers: 0, running: false };
    /** @type {number|null} head of the newest presence applied */
    this.presenceHead = null;
    this.framesSent = {};
    this.lastResumeAfter = null;
    this.firstReplayedSeq = null;
    this.resumeRequestId = null;
    /** request_id -> {type, id} for replies and errors */
    this.requests = new Map();
    /** client_message_ids written on the current socket */
    this.sentOnSocket = new Set();
    /** decide / cancel commands not yet answered, by "type:id" (re-sent after a resume) */
    this.commands = new Map();
    /** approval ids / run ids with a decide / cancel in flight */
    this.busy = { approval: new Set(), cancel: new Set() };
    this._persistTimer = null;
    this._tickTimer = null;
    this._retryTimer = null;

    this.conn = createConnection({
      onOpen: () => this._onOpen(),
      onFrame: (frame) => this._onFrame(frame),
      onClose: (info) => this._onClose(info),
      onWaiting: (delay) => this._setState(STATE.RECONNECTING, { retryAt: this.now() + delay }),
      onConnecting: () => {
        if (this.state === STATE.REJECTED) return;
        this._setState(this.everLive || this.state === STATE.RECONNECTING ? STATE.RECONNECTING : STATE.CONNECTING, {});
      },
    });

    this.view.reset(this.model, this.loop.cursor);
    this._pruneLedger();
    this.view.setLedger(this.ledger.entries(), this.model);
    this.view.setConnection(this.state, this.stateDetail);
  }

  /** @returns {number} the committed cursor */
  get cursor() {
    return this.loop.cursor;
  }

  /** Open the first socket and start the periodic checks. */
  start() {
    if (this._tickTimer === null) this._tickTimer = this.timers.setInterval(() => this.loop.tick(), 1000);
    this.conn.start();
  }

  /** Close the socket for good and write the snapshot (tests, page teardown). */
  stop() {
    this.conn.stop();
    if (this._tickTimer !== null) this.timers.clearInterval(this._tickTimer);
    this._tickTimer = null;
    this.persistNow();
  }

  _requestId() {
    this._rid += 1;
    return `r${this._rid}`;
  }

  _send(frame, onWritten) {
    return this.conn.send(frame, (f) => {
      this.framesSent[f.type] = (this.framesSent[f.type] || 0) + 1;
      if (onWritten) onWritten(f);
    });
  }

  _setState(state, detail = {}) {
    this.state = state;
    this.stateDetail = detail;
    this.view.setConnection(state, detail);
  }

  // --- handshake -----------------------------------------------------------------

  _onOpen() {
    this.handshake = "pending";
    this.replayHead = null;
    this.loop.reset();
    this.acker.reset();
    this.requests.clear();
    this.sentOnSocket.clear();
    this._clearBusy();
    this._setState(STATE.RESUMING, {});
    const after = this.loop.cursor;
    const frame = {
      type: P.RESUME,
      protocol: P.PROTOCOL_VERSION,
      tab_id: this.tabId,
      request_id: this._requestId(),
      session_id: this.sessionId,
      after,
    };
    if (after > 0) frame.epoch = this.epoch;
    this.resumeRequestId = frame.request_id;
    this.lastResumeAfter = after;
    this.firstReplayedSeq = null;
    this._send(frame);
  }

  _onClose(info) {
    this.handshake = "none";
    this.replayHead = null;
    this.acker.cancel();
    this.loop.reset();
    this.requests.clear();
    this.sentOnSocket.clear();
    this._clearBusy();
    this.persistNow();
    if (info.fatal) {
      const reason = info.code === P.CLOSE_NOT_AUTHENTICATED ? REASON_NOT_AUTHENTICATED : REASON_PROTOCOL_VIOLATION;
      const message =
        info.code === P.CLOSE_NOT_AUTHENTICATED
          ? "You are signed out. Sign in again to continue this session."
          : "The server closed the connection because of a protocol error.";
      this.rejection = { reason, message, code: info.code };
      this._setState(STATE.REJECTED, this.rejection);
    } else if (this.state !== STATE.REJECTED) {
      this._setState(STATE.RECONNECTING, {});
    }
  }

  _onFrame(frame) {
    switch (frame.type) {
      case P.RESUME_OK:
        return this._onResumeOk(frame);
      case P.RESUME_REJECTED:
        return this._onRejected(frame);
      case P.EVENT:
        return this._onEvent(frame);
      case P.SEND_OK:
        return this._onSendOk(frame);
      case P.DECIDE_OK:
      case P.CANCEL_OK:
        this._commandAnswered(frame.request_id);
        return; // the card or run changes with its approval.decided / run.finished event
      case P.SYNC_OK:
        this.requests.delete(frame.request_id);
        return this.loop.onSyncOk(frame);
      case P.PRESENCE: {
        if (frame.session_id && frame.session_id !== this.sessionId) return;
        // Presence carries the head it was computed at: an older one that
        // arrives late (from another server) must not undo a newer "running".
        const head = Number.isInteger(frame.head) ? frame.head : null;
        if (head !== null && this.presenceHead !== null && head < this.presenceHead) return;
        if (head !== null) this.presenceHead = head;
        this.presence = { viewers: Number(frame.viewers) || 0, running: !!frame.running };
        return this.view.setPresence(this.presence);
      }
      case P.ERROR:
        return this._onError(frame);
      default:
        return; // pong and unknown frame types: nothing to do
    }
  }

  _onResumeOk(frame) {
    if (this.handshake !== "pending") return;
    if (frame.session_id && frame.session_id !== this.sessionId) return;
    this.handshake = "ok";
    this.presenceHead = null; // a new socket: its presence frames start afresh
    this.conn.setReady(true);
    if (typeof frame.epoch === "string" && frame.epoch) this.epoch = frame.epoch;
    this.replayHead = Number.isInteger(frame.head) ? frame.head : this.loop.cursor;
    this.persistNow();
    if (this.loop.cursor >= this.replayHead) this._goLive();
  }

  _onRejected(frame) {
    if (this.handshake !== "pending") return;
    this.handshake = "none";
    this.conn.stop(P.CLOSE_NORMAL, "resume rejected");
    this.acker.cancel();
    this.loop.reset();
    this._clearBusy();
    this.rejection = {
      reason: String(frame.reason || "unknown"),
      message: String(frame.message || ""),
      earliest: frame.earliest,
      head: frame.head,
    };
    this._setState(STATE.REJECTED, this.rejection);
  }

  _goLive() {
    this.everLive = true;
    this._setState(STATE.LIVE, {});
    this._flushLedger();
    this._flushCommands();
  }

  // --- events ------------------------------------------------------------------

  _onEvent(frame) {
    if (this.handshake !== "ok") return;
    if (frame.session_id && frame.session_id !== this.sessionId) return;
    if (this.firstReplayedSeq === null) this.firstReplayedSeq = frame.seq;
    if (this.hooks?.take("after-receive")) {
      this.conn.drop("test failpoint after-receive");
      return;
    }
    this.loop.receive(frame);
  }

  _applyEvent(ev) {
    const changes = applyEvent(this.model, ev);
    this.view.applyChanges(changes, this.model);
    const d = ev.data || {};
    if (ev.kind === P.K_USER_MESSAGE && d.client_message_id) {
      this.ledger.confirm(d.client_message_id, { seq: ev.seq, run_id: ev.run_id });
      this._pruneLedger();
      this.view.setLedger(this.ledger.entries(), this.model);
    } else if (ev.kind === P.K_APPROVAL_DECIDED && d.approval_id) {
      this.commands.delete(`${P.DECIDE}:${d.approval_id}`);
      this._setBusy("approval", d.approval_id, false);
    } else if (ev.kind === P.K_RUN_FINISHED && ev.run_id) {
      this.commands.delete(`${P.CANCEL}:${ev.run_id}`);
      this._setBusy("cancel", ev.run_id, false);
    }
  }

  _onCommit(seq) {
    this.view.setCursor(seq);
    if (this.hooks?.take("after-render")) {
      this.conn.drop("test failpoint after-render");
      return;
    }
    this.acker.note(seq);
    this._persistSoon();
    if (this.state !== STATE.LIVE && this.handshake === "ok" && this.replayHead !== null && seq >= this.replayHead) {
      this._goLive();
    }
  }

  // --- persistence ---------------------------------------------------------------

  _persistSoon() {
    if (this._persistTimer !== null) return;
    this._persistTimer = this.timers.setTimeout(() => {
      this._persistTimer = null;
      this.persistNow();
    }, this.persistDelayMs);
  }

  /**
   * Write the committed cursor and the transcript it describes (one key, one
   * write: see SessionStore.commit). Safe to call at any time between events.
   */
  persistNow() {
    if (this._persistTimer !== null) this.timers.clearTimeout(this._persistTimer);
    this._persistTimer = null;
    if (this.loop.cursor === 0 && !this.epoch) return;
    this.store.commit(this.sessionId, { epoch: this.epoch, cursor: this.loop.cursor, model: this.model });
  }

  // --- sending -------------------------------------------------------------------

  /**
   * Why `text` cannot be sent, or null.
   * @param {string} text
   * @returns {string|null}
   */
  static validate(text) {
    if (typeof text !== "string" || !text.trim()) return "Type a message first.";
    if (text.length > P.MAX_TEXT_CHARS)
      return `Messages are limited to ${P.MAX_TEXT_CHARS.toLocaleString("en-US")} characters (this one has ${text.length.toLocaleString("en-US")}).`;
    const frameBytes = new TextEncoder().encode(
      JSON.stringify({ type: P.SEND, request_id: "r0000000000", client_message_id: "m-00000000-0000-0000-0000-000000000000", text }),
    ).length;
    if (frameBytes > P.MAX_FRAME_BYTES - 256) return "This message is too large to send.";
    return null;
  }

  /**
   * A new user input: recorded in the ledger (and stored) before anything is
   * written, shown as pending, sent now if the session is live, else once it is.
   * @param {string} text
   * @returns {{ok: true, id: string}|{ok: false, error: string}}
   */
  submit(text) {
    if (this.state === STATE.REJECTED) return { ok: false, error: "This session is not connected." };
    const problem = SessionClient.validate(text);
    if (problem) return { ok: false, error: problem };
    const entry = this.ledger.prepare(text);
    this.view.setLedger(this.ledger.entries(), this.model);
    this._flushLedger();
    return { ok: true, id: entry.id };
  }

  /** Write every unconfirmed input not yet written on this socket, in order. */
  _flushLedger() {
    if (this.state !== STATE.LIVE) return;
    for (const entry of this.ledger.unconfirmed()) {
      if (!this.conn.isOpen || this.state !== STATE.LIVE) return;
      if (this.sentOnSocket.has(entry.id)) continue;
      this.sentOnSocket.add(entry.id);
      const requestId = this._requestId();
      this.requests.set(requestId, { type: P.SEND, id: entry.id });
      this._send({ type: P.SEND, request_id: requestId, client_message_id: entry.id, text: entry.text }, () => {
        this.ledger.markSent(entry.id);
        this.view.setLedger(this.ledger.entries(), this.model);
        if (this.hooks?.take("after-send")) this.conn.drop("test failpoint after-send");
      });
    }
  }

  _onSendOk(frame) {
    this.requests.delete(frame.request_id);
    if (!frame.client_message_id) return;
    this.ledger.confirm(frame.client_message_id, { seq: frame.seq, run_id: frame.run_id, status: frame.status });
    this._pruneLedger();
    this.view.setLedger(this.ledger.entries(), this.model);
  }

  _pruneLedger() {
    this.ledger.prune((id) => hasUserMessage(this.model, id));
  }

  /**
   * Remove a failed input from the ledger.
   * @param {string} id
   */
  discard(id) {
    if (this.ledger.discard(id)) this.view.setLedger(this.ledger.entries(), this.model);
  }

  // --- approvals and cancel --------------------------------------------------------

  _setBusy(kind, id, busy) {
    const set = this.busy[kind];
    if (busy ? set.has(id) : !set.has(id)) return;
    if (busy) set.add(id);
    else set.delete(id);
    this.view.setBusy(kind, id, busy);
  }

  _clearBusy() {
    for (const kind of Object.keys(this.busy)) {
      for (const id of Array.from(this.busy[kind])) this._setBusy(kind, id, false);
    }
  }

  /**
   * Approve or deny a pending approval (first decision wins, from any tab).
   * @param {string} approvalId
   * @param {"approve"|"deny"} decision
   * @returns {boolean} whether the command was sent
   */
  decide(approvalId, decision) {
    if (this.state !== STATE.LIVE || !P.DECISIONS.includes(decision)) return false;
    const command = { type: P.DECIDE, approval_id: approvalId, decision };
    if (!this._sendCommand(command, approvalId)) return false;
    this._setBusy("approval", approvalId, true);
    return true;
  }

  /**
   * Cancel a run (the active one, or a queued one).
   * @param {string} [runId] default: the active run
   * @returns {boolean} whether the command was sent
   */
  cancel(runId) {
    const target = runId || activeRun(this.model)?.runId;
    if (this.state !== STATE.LIVE || !target) return false;
    if (!this._sendCommand({ type: P.CANCEL, run_id: target }, target)) return false;
    this._setBusy("cancel", target, true);
    return true;
  }

  /**
   * Send a decide or cancel and remember it until it is answered or its outcome
   * (approval.decided, run.finished) is in the log: one lost with a socket is
   * sent again after the next resume. Repeating either is safe: the first
   * decision stands, and a finished run is not_pending.
   */
  _sendCommand(command, id) {
    const requestId = this._requestId();
    this.requests.set(requestId, { type: command.type, id });
    this.commands.set(`${command.type}:${id}`, command);
    return this._send({ ...command, request_id: requestId });
  }

  _commandAnswered(requestId) {
    const req = this.requests.get(requestId);
    this.requests.delete(requestId);
    if (req) this.commands.delete(`${req.type}:${req.id}`);
  }

  _scheduleRetry() {
    if (this._retryTimer != null) return;
    this._retryTimer = this.timers.setTimeout(() => {
      this._retryTimer = null;
      if (this.state !== STATE.LIVE) return; // the next resume re-sends them
      this._flushLedger();
      this._flushCommands();
    }, RETRY_AFTER_INTERNAL_ERROR_MS);
  }

  /** Send every unanswered decide / cancel that is not already in flight on this socket. */
  _flushCommands() {
    const inFlight = new Set(Array.from(this.requests.values(), (r) => `${r.type}:${r.id}`));
    for (const [key, command] of Array.from(this.commands)) {
      if (inFlight.has(key)) continue;
      const id = key.slice(command.type.length + 1);
      if (!this._sendCommand(command, id)) return;
      this._setBusy(command.type === P.DECIDE ? "approval" : "cancel", id, true);
    }
  }

  _onError(frame) {
    const req = this.requests.get(frame.request_id);
    if (req && req.type !== P.SYNC && frame.code === P.E_INTERNAL) {
      // The server failed on it (say, its database restarting) and did
      // nothing: a send is idempotent by its client_message_id and a decide
      // or cancel by its target, so it goes again shortly, as after a resume.
      this.requests.delete(frame.request_id);
      if (req.type === P.SEND) this.sentOnSocket.delete(req.id);
      this._scheduleRetry();
      return;
    }
    this._commandAnswered(frame.request_id);
    const message = String(frame.message || frame.code || "error");
    if (!req) {
      console.warn("server error", frame);
      return;
    }
    if (req.type === P.SYNC) {
      this.loop.onSyncError();
    } else if (req.type === P.SEND) {
      this.ledger.fail(req.id, String(frame.code || "error"), message);
      this.sentOnSocket.delete(req.id);
      this.view.setLedger(this.ledger.entries(), this.model);
    } else if (req.type === P.DECIDE) {
      this._setBusy("approval", req.id, false);
      if (frame.code === P.E_ALREADY_DECIDED) {
        const verb = frame.decision === P.APPROVE ? "approved" : "denied";
        this.view.notify(`Already ${verb}${frame.decided_by ? ` by ${frame.decided_by}` : ""}.`, "info");
      } else {
        this.view.notify(`Could not record the decision: ${message}`, "error");
      }
    } else if (req.type === P.CANCEL) {
      this._setBusy("cancel", req.id, false);
      if (frame.code !== P.E_NOT_PENDING) this.view.notify(`Could not cancel: ${message}`, "error");
    }
  }

  // --- rejections ----------------------------------------------------------------

  /**
   * Drop this tab's cache of the session and resume from 0 (after
   * `epoch_mismatch` or `cursor_ahead`). The ledger stays: unconfirmed inputs
   * are re-sent after the replay, with their ids.
   */
  reloadFromZero() {
    this.conn.stop(P.CLOSE_NORMAL, "reload from 0");
    this.store.drop(this.sessionId);
    this.epoch = null;
    this.model = emptyModel();
    this.loop.reset(0);
    this.acker.reset();
    this.rejection = null;
    this.everLive = false;
    this.view.reset(this.model, 0);
    this.view.setLedger(this.ledger.entries(), this.model);
    this._setState(STATE.CONNECTING, {});
    this.conn.start();
  }

  /**
   * A snapshot for diagnostics and tests.
   * @returns {object}
   */
  snapshot() {
    return {
      sessionId: this.sessionId,
      tabId: this.tabId,
      epoch: this.epoch,
      cursor: this.loop.cursor,
      connectionState: this.state,
      rejection: this.rejection ? { ...this.rejection } : null,
      ledger: this.ledger.entries(),
      lastResumeAfter: this.lastResumeAfter,
      firstReplayedSeq: this.firstReplayedSeq,
      replayHead: this.replayHead,
      held: this.loop.heldCount,
      presence: { ...this.presence },
      framesSent: { ...this.framesSent },
      stats: { ...this.loop.stats },
    };
  }
}
