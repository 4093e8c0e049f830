/**
 * Session state and the apply loop: what a tab knows about one session and how
 * events get from the socket into the display, in order, exactly once.
 *
 * - `SessionClient`: the handshake (`resume` after the cursor), the replay,
 *   the send ledger, approvals, cancel, rejections, persistence. The cursor
 *   and acks are apply.js's `ApplyLoop` and `Acker`.
 *
 * Its connection state is one field, `state`, set only by `_setState`:
 *
 *   connecting   -> resuming     a socket opened: the `resume` is sent
 *   resuming     -> replaying    `resume_ok`: the events up to its head follow
 *   replaying    -> live         the cursor reached that head (at once if it was there)
 *   any          -> reconnecting the socket closed (the transport retries)
 *   resuming     -> rejected     `resume_rejected` this tab cannot recover from,
 *                                or a close that is final (4400, 4401)
 *
 * `epoch_mismatch` and `cursor_expired` are recovered from, on the same
 * socket, with a notice: the cache is dropped and the session reloaded from
 * the server (from 0, or from the first event it still keeps).
 *
 * None of this touches the DOM: the display is a `view` object (ui.js in the
 * browser, a recorder in tests).
 *
 * @module session
 */

import { Acker, ApplyLoop, compactedItem } from "./apply.js";
import * as P from "./constants.js";
import { Ledger } from "./ledger.js";
import { realTimers } from "./socket.js";
import { activeRun, applyCompacted, applyEvent, emptyModel, hasUserMessage, isModel } from "./transcript.js";

/** Connection states shown to the person (and in `data-state`). */
export const STATE = Object.freeze({
  CONNECTING: "connecting",
  RESUMING: "resuming",
  REPLAYING: "replaying",
  LIVE: "live",
  RECONNECTING: "reconnecting",
  REJECTED: "rejected",
});

/** `data-reason` values for fatal closes (resume rejections use the protocol's reasons). */
export const REASON_NOT_AUTHENTICATED = "not_authenticated";
/** How long after an `internal_error` a send, decide or cancel goes again. */
export const RETRY_AFTER_INTERNAL_ERROR_MS = 1000;
export const REASON_PROTOCOL_VIOLATION = "protocol_violation";
/** What the person is told when the tab rebuilt its transcript from the server. */
export const NOTICE_EPOCH_RELOAD = "This session's history was rebuilt on the server: this tab reloaded it from the start.";
export const NOTICE_EXPIRED_RELOAD = "The server no longer keeps the start of this session: this tab shows what it still has.";

/**
 * The state the display shows: "replaying" is shown as "resuming" (the DOM's
 * `data-state` values are resuming until live, as they always were).
 * @param {string} state
 * @returns {string}
 */
export function shownState(state) {
  return state === STATE.REPLAYING ? STATE.RESUMING : state;
}

/**
 * A view that ignores everything; the interface `SessionClient` drives.
 * @type {object}
 */
export const NULL_VIEW = {
  reset(_model, _cursor) {},
  applyChanges(_changes, _model) {},
  setCursor(_cursor) {},
  flush() {},
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
    /** the head of the replay under way (state replaying) */
    this.replayHead = null;
    this.presence = { viewers: 0, running: false };
    /** @type {number|null} head of the newest presence applied */
    this.presenceHead = null;
    this.framesSent = {};
    /** events skipped as superseded in compacted replays */
    this.stats = { compacted: 0 };
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
        this._setState(this.state === STATE.CONNECTING ? STATE.CONNECTING : STATE.RECONNECTING, {});
      },
    });

    this.view.reset(this.model, this.loop.cursor);
    this._pruneLedger();
    this.view.setLedger(this.ledger.entries(), this.model);
    this.view.setConnection(shownState(this.state), this.stateDetail);
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

  /** THE writer of `state` (see the module's comment for the transitions). */
  _setState(state, detail = {}) {
    // Resuming and replaying look the same: the display hears of it once.
    const quiet = this.state === STATE.RESUMING && state === STATE.REPLAYING;
    this.state = state;
    this.stateDetail = detail;
    if (!quiet) this.view.setConnection(shownState(state), detail);
  }

  /** The handshake was accepted on this socket (replaying or live). */
  get _following() {
    return this.state === STATE.REPLAYING || this.state === STATE.LIVE;
  }

  /** Everything that belongs to one socket, forgotten (a new socket, a close, a rejection, a reload). */
  _resetSocket() {
    this.replayHead = null;
    this.loop.reset();
    this.acker.reset();
    this.requests.clear();
    this.sentOnSocket.clear();
    this._clearBusy();
  }

  /** Send the handshake: resume after the committed cursor, offering compaction and batches. */
  _sendResume() {
    const after = this.loop.cursor;
    const frame = {
      type: P.RESUME,
      protocol: P.PROTOCOL_VERSION,
      tab_id: this.tabId,
      request_id: this._requestId(),
      session_id: this.sessionId,
      after,
      features: [P.FEATURE_COMPACT, P.FEATURE_BATCH],
    };
    if (after > 0) frame.epoch = this.epoch;
    this.resumeRequestId = frame.request_id;
    this.lastResumeAfter = after;
    this.firstReplayedSeq = null;
    this._send(frame);
  }

  // --- handshake -----------------------------------------------------------------

  _onOpen() {
    this._resetSocket();
    this._setState(STATE.RESUMING, {});
    this._sendResume();
  }

  _onClose(info) {
    this._resetSocket();
    this.persistNow();
    if (info.fatal) {
      const reason = info.code === P.CLOSE_NOT_AUTHENTICATED ? REASON_NOT_AUTHENTICATED : REASON_PROTOCOL_VIOLATION;
      const message =
        info.code === P.CLOSE_NOT_AUTHENTICATED
          ? "You are signed out. Sign in again to continue this session."
          : "The server closed the connection because of a protocol error.";
      this._setState(STATE.REJECTED, { reason, message, code: info.code });
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
      case P.COMPACTED:
        return this._onCompacted(frame);
      case P.BATCH:
        // A replay's frames, several to a message: each as if it came alone.
        if (Array.isArray(frame.frames)) {
          for (const inner of frame.frames) {
            if (inner && typeof inner === "object" && inner.type !== P.BATCH) this._onFrame(inner);
          }
        }
        return;
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
    if (this.state !== STATE.RESUMING) return;
    if (frame.session_id && frame.session_id !== this.sessionId) return;
    this.presenceHead = null; // a new socket: its presence frames start afresh
    this.conn.setReady(true);
    if (typeof frame.epoch === "string" && frame.epoch) this.epoch = frame.epoch;
    this.replayHead = Number.isInteger(frame.head) ? frame.head : this.loop.cursor;
    this.persistNow();
    if (this.loop.cursor >= this.replayHead) this._goLive();
    else this._setState(STATE.REPLAYING, {});
  }

  _onRejected(frame) {
    if (this.state !== STATE.RESUMING) return;
    const reason = String(frame.reason || "unknown");
    if (reason === P.R_EPOCH_MISMATCH && this.loop.cursor > 0) {
      // The log was rebuilt (an operator rotated the epoch): what this tab
      // shows means nothing now. Reload from 0 on this socket, and say so.
      this._rebuild(0, null);
      this.view.notify(NOTICE_EPOCH_RELOAD, "info");
      this._sendResume();
      return;
    }
    if (reason === P.R_CURSOR_EXPIRED && Number.isInteger(frame.earliest) && frame.earliest >= 1 && typeof frame.epoch === "string") {
      // The events after our cursor are gone for good: rebuild from what the
      // server still keeps, never an empty restart, and say so.
      this._rebuild(frame.earliest - 1, frame.epoch);
      this.view.notify(NOTICE_EXPIRED_RELOAD, "info");
      this._sendResume();
      return;
    }
    this.conn.stop(P.CLOSE_NORMAL, "resume rejected");
    this._resetSocket();
    this._setState(STATE.REJECTED, {
      reason,
      message: String(frame.message || ""),
      earliest: frame.earliest,
      head: frame.head,
    });
  }

  /**
   * Drop this tab's cache of the session and start over from `cursor` (the
   * ledger stays: unconfirmed inputs are re-sent after the replay).
   */
  _rebuild(cursor, epoch) {
    this.store.drop(this.sessionId);
    this.epoch = epoch;
    this.model = emptyModel();
    this._resetSocket();
    this.loop.reset(cursor);
    this.view.reset(this.model, cursor);
    this.view.setLedger(this.ledger.entries(), this.model);
  }

  _goLive() {
    this._setState(STATE.LIVE, {});
    this.view.flush();
    this._flushLedger();
    this._flushCommands();
  }

  // --- events ------------------------------------------------------------------

  _onEvent(frame) {
    if (!this._following) return;
    if (frame.session_id && frame.session_id !== this.sessionId) return;
    if (this.firstReplayedSeq === null) this.firstReplayedSeq = frame.seq;
    if (this.hooks?.take("after-receive")) {
      this.conn.drop("test failpoint after-receive");
      return;
    }
    this.loop.receive(frame);
  }

  _onCompacted(frame) {
    if (!this._following) return;
    if (frame.session_id && frame.session_id !== this.sessionId) return;
    const item = compactedItem(frame);
    if (item === null) return;
    if (this.firstReplayedSeq === null) this.firstReplayedSeq = item.seq;
    this.loop.receive(item);
  }

  _applyEvent(ev) {
    if (ev.type === P.COMPACTED) {
      // Applied before the cursor moves: count only what this tab skipped.
      this.stats.compacted += ev.last - Math.max(ev.seq, this.loop.cursor + 1) + 1;
      this.view.applyChanges(applyCompacted(this.model, ev), this.model);
      return;
    }
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
    // Live events are few: each is shown at once. A replay's are rendered
    // once per animation frame (see ui.js flush).
    if (this.state === STATE.LIVE) this.view.flush();
    if (this.hooks?.take("after-render")) {
      this.conn.drop("test failpoint after-render");
      return;
    }
    this.acker.note(seq);
    this._persistSoon();
    if (this.state === STATE.REPLAYING && seq >= this.replayHead) this._goLive();
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
    this._rebuild(0, null);
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
      connectionState: shownState(this.state),
      phase: this.state,
      rejection: this.state === STATE.REJECTED ? { ...this.stateDetail } : null,
      ledger: this.ledger.entries(),
      lastResumeAfter: this.lastResumeAfter,
      firstReplayedSeq: this.firstReplayedSeq,
      replayHead: this.replayHead,
      held: this.loop.heldCount,
      presence: { ...this.presence },
      framesSent: { ...this.framesSent },
      stats: { ...this.loop.stats, ...this.stats },
    };
  }
}
