/**
 * Session state and the apply loop: what a tab knows about one session and how
 * events get from the socket into the display, in order, exactly once.
 *
 * - `SessionClient`: the handshake (`resume` after the cursor), the replay,
 *   rejections, persistence. The cursor and acks are apply.js's `ApplyLoop`
 *   and `Acker`; what the tab sends (inputs, decisions, cancels, one `Push`
 *   each) is outbox.js's `Outbox`.
 *
 * Its connection state is one value, `current`: the state's name and detail,
 * and what the socket's handshake set (`NO_SOCKET`), replaced whole by
 * `_setState` (which refuses any move view.js's `TRANSITIONS` does not
 * declare) and `_socketState` only; `state`, `replayHead`, … read it.
 *
 * `epoch_mismatch` and `cursor_expired` are recovered from, on the same
 * socket, with a notice: the cache is dropped and the session reloaded from
 * the server (from 0, or from the first event it still keeps).
 *
 * None of this touches the DOM: the display is a `view` object (ui.js in the
 * browser, a recorder in tests). Three hook points (`options.hooks`: view.js's
 * `SessionHooks`) let a caller watch, and stop, steps of the client.
 *
 * @module session
 */

import { Acker, ApplyLoop, compactedItem } from "../model/apply.js";
import { checkTransition, realTimers } from "../model/timers.js";
import { activeRun, applyCompacted, applyEvent, emptyModel, isModel } from "../model/transcript.js";
import * as P from "../wire/constants.js";
import { Ledger } from "./ledger.js";
import { decideFrame, Outbox } from "./outbox.js";
import { Persister } from "./store.js";
import * as V from "./view.js";
import { completeView, NO_HOOKS, NULL_VIEW, STATE, shownState, TRANSITIONS } from "./view.js";

export { NO_HOOKS, NULL_VIEW, STATE, TRANSITIONS };

/** A state value's socket part before any handshake (see the module). */
const NO_SOCKET = Object.freeze({ resumeRequestId: null, resumeAfter: null, replayHead: null, firstReplayedSeq: null, presenceHead: null });

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
   * @param {number} [options.persistDelayMs=250]
   * @param {import("./view.js").SessionHooks} [options.hooks] see view.js (each bound to the object given)
   */
  constructor({ sessionId, tabId, store, createConnection, view = NULL_VIEW, timers = realTimers, now = Date.now, persistDelayMs = 250, hooks = NO_HOOKS }) {
    this.sessionId = sessionId;
    const bound = (name) => (typeof hooks[name] === "function" && hooks !== NO_HOOKS ? hooks[name].bind(hooks) : NO_HOOKS[name]);
    this.hooks = Object.fromEntries(Object.keys(NO_HOOKS).map((name) => [name, bound(name)]));
    this.tabId = tabId;
    this.store = store;
    this.view = completeView(view);
    this.timers = timers;
    this.now = now;

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
      send: (frame) => this.outbox.sync(frame),
      onCommit: (seq, ev) => this._onCommit(seq, ev),
      now,
      requestId: () => this._requestId(),
    });
    this.acker = new Acker({ send: (frame) => this._send(frame), timers, now });

    /** The connection state and what the current socket's handshake set (see the module). */
    this.current = Object.freeze({ name: STATE.CONNECTING, detail: {}, ...NO_SOCKET });
    this.presence = { viewers: 0, running: false };
    this.framesSent = {};
    /** events skipped as superseded in compacted replays */
    this.stats = { compacted: 0 };
    /** the handshake features the server said it uses */
    this.serverFeatures = [];
    this.outbox = new Outbox({
      send: (frame, onWritten) => this._send(frame, onWritten),
      requestId: () => this._requestId(),
      live: () => this.state === STATE.LIVE && this.conn.isOpen,
      ledger: this.ledger,
      view: this.view,
      model: () => this.model,
      onSyncError: () => this.loop.onSyncError(),
      onWritten: (entry) => this.hooks.sent(entry),
      timers,
    });
    this.persister = new Persister({
      store,
      sessionId,
      timers,
      delayMs: persistDelayMs,
      snapshot: () => (this.loop.cursor === 0 && !this.epoch ? null : { epoch: this.epoch, cursor: this.loop.cursor, model: this.model }),
    });
    this._tickTimer = null;

    this.conn = createConnection({
      onOpen: () => this._onOpen(),
      onFrame: (frame) => this._onFrame(frame),
      onClose: (info) => this._onClose(info),
      onWaiting: (delay) => this.state !== STATE.REJECTED && this._setState(STATE.RECONNECTING, { retryAt: this.now() + delay }),
      onConnecting: () => {
        if (this.state === STATE.REJECTED) return;
        this._setState(this.state === STATE.CONNECTING ? STATE.CONNECTING : STATE.RECONNECTING, {});
      },
    });

    this.view.attach(this);
    this.view.reset(this.model, this.loop.cursor);
    this.outbox.pruneLedger();
    this.view.setLedger(this.ledger.entries(), this.model);
    this.view.setConnection(shownState(this.state), this.stateDetail);
  }

  /** @returns {number} the committed cursor */
  get cursor() {
    return this.loop.cursor;
  }

  /** @returns {boolean} whether the server honours "stop and send" (the view reads this) */
  get canInterrupt() {
    return this.serverFeatures.includes(P.FEATURE_INTERRUPT);
  }

  /** @returns {boolean} whether commands may go (the view reads this) */
  get isLive() {
    return this.state === STATE.LIVE;
  }

  /** Whether a decide (`kind` "approval") or cancel for `id` is in flight (the view reads this). */
  isBusy(kind, id) {
    return this.outbox.isBusy(kind, id);
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

  /** THE writer of `state` (see TRANSITIONS): a new detail alone is reported too. */
  _setState(state, detail = {}) {
    checkTransition(TRANSITIONS, this.state, state, "session");
    const from = this.state;
    // Resuming and replaying look the same: the display hears of it once.
    const quiet = from === STATE.RESUMING && state === STATE.REPLAYING;
    this.current = Object.freeze({ ...this.current, name: state, detail });
    if (from !== state) this.hooks.moved(from, state);
    if (!quiet) this.view.setConnection(shownState(state), detail);
  }

  /** What the current socket's handshake set, changed (the state's name stays). */
  _socketState(changes) {
    this.current = Object.freeze({ ...this.current, ...changes });
  }

  /** The handshake was accepted on this socket (replaying or live). */
  get _following() {
    return this.state === STATE.REPLAYING || this.state === STATE.LIVE;
  }

  /** Everything that belongs to one socket, forgotten (a new socket, a close, a rejection, a reload). */
  _resetSocket() {
    this._socketState({ replayHead: null });
    this.loop.reset();
    this.acker.reset();
    this.outbox.detach();
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
      features: [P.FEATURE_COMPACT, P.FEATURE_BATCH, P.FEATURE_INTERRUPT, P.FEATURE_BRANCHES],
    };
    if (after > 0) frame.epoch = this.epoch;
    this._socketState({ ...NO_SOCKET, resumeRequestId: frame.request_id, resumeAfter: after });
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
      const reason = info.code === P.CLOSE_NOT_AUTHENTICATED ? V.REASON_NOT_AUTHENTICATED : V.REASON_PROTOCOL_VIOLATION;
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
      case P.DECIDE_OK:
      case P.CANCEL_OK:
      case P.SWITCH_OK:
        return this.outbox.reply(frame);
      case P.SYNC_OK:
        this.outbox.answered(frame.request_id);
        return this.loop.onSyncOk(frame);
      case P.PRESENCE: {
        if (frame.session_id && frame.session_id !== this.sessionId) return;
        // Presence carries the head it was computed at: an older one that
        // arrives late (from another server) must not undo a newer "running".
        const head = Number.isInteger(frame.head) ? frame.head : null;
        const newest = this.current.presenceHead;
        if (head !== null && newest !== null && head < newest) return;
        if (head !== null) this._socketState({ presenceHead: head });
        this.presence = { viewers: Number(frame.viewers) || 0, running: !!frame.running };
        return this.view.setPresence(this.presence);
      }
      case P.TITLE:
        if (frame.session_id && frame.session_id !== this.sessionId) return;
        return typeof frame.title === "string" ? this.view.setTitle(frame.title) : undefined;
      case P.ERROR:
        return this.outbox.error(frame);
      default:
        return; // pong and unknown frame types: nothing to do
    }
  }

  _onResumeOk(frame) {
    if (this.state !== STATE.RESUMING) return;
    if (frame.session_id && frame.session_id !== this.sessionId) return;
    this._socketState({ presenceHead: null }); // a new socket: its presence frames start afresh
    this.serverFeatures = Array.isArray(frame.features) ? frame.features : [];
    if (typeof frame.title === "string") this.view.setTitle(frame.title);
    this.conn.setReady();
    if (typeof frame.epoch === "string" && frame.epoch) this.epoch = frame.epoch;
    this._socketState({ replayHead: Number.isInteger(frame.head) ? frame.head : this.loop.cursor });
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
      this.view.notify(V.NOTICE_EPOCH_RELOAD, "info");
      this._sendResume();
      return;
    }
    if (reason === P.R_CURSOR_EXPIRED && Number.isInteger(frame.earliest) && frame.earliest >= 1 && typeof frame.epoch === "string") {
      // The events after our cursor are gone for good: rebuild from what the
      // server still keeps, never an empty restart, and say so.
      this._rebuild(frame.earliest - 1, frame.epoch);
      this.view.notify(V.NOTICE_EXPIRED_RELOAD, "info");
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
    this.outbox.flushLedger();
    this.outbox.flushCommands();
  }

  // --- events ------------------------------------------------------------------

  _onEvent(frame) {
    if (!this._following) return;
    if (frame.session_id && frame.session_id !== this.sessionId) return;
    if (this.hooks.received(frame) === false) return;
    if (this.firstReplayedSeq === null) this._socketState({ firstReplayedSeq: frame.seq });
    this.loop.receive(frame);
  }

  _onCompacted(frame) {
    if (!this._following) return;
    if (frame.session_id && frame.session_id !== this.sessionId) return;
    const item = compactedItem(frame);
    if (item === null) return;
    if (this.firstReplayedSeq === null) this._socketState({ firstReplayedSeq: item.seq });
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
    this.outbox.logged(ev);
  }

  _onCommit(seq) {
    this.view.setCursor(seq);
    // Live events are few: each is shown at once. A replay's are rendered
    // once per animation frame (see ui.js flush).
    if (this.state === STATE.LIVE) this.view.flush();
    this._rendered(seq);
  }

  /** The event at `seq` is shown: ack it, store it (unless the `rendered` hook stops it). */
  _rendered(seq) {
    if (this.hooks.rendered(seq) === false) return;
    this.acker.note(seq);
    this.persister.soon();
    if (this.state === STATE.REPLAYING && seq >= this.replayHead) this._goLive();
  }

  /**
   * Write the committed cursor and the transcript it describes (one key, one
   * write: see SessionStore.commit). Safe to call at any time between events.
   */
  persistNow() {
    this.persister.now();
  }

  // --- what the person does --------------------------------------------------------

  /**
   * A new user input: recorded in the ledger (and stored) before anything is
   * written, shown as pending, sent now if the session is live, else once it is.
   * @param {string} text
   * @param {{interrupt?: boolean}} [options] interrupt: "stop and send"
   * @returns {{ok: true, id: string}|{ok: false, error: string}}
   */
  submit(text, options = {}) {
    if (this.state === STATE.REJECTED) return { ok: false, error: "This session is not connected." };
    return this.outbox.submit(text, options);
  }

  /** Remove the failed input `id` (its client_message_id) from the ledger. */
  discard(id) {
    this.outbox.discard(id);
  }

  /**
   * Decide a pending approval (first decision wins, from any tab): a
   * denial's `reason`, an edit's `args`, a `response`, or `all` (its step).
   * @returns {boolean} whether the command was sent
   */
  decide(approvalId, decision, more = {}) {
    if (this.state !== STATE.LIVE || !P.ALL_DECISIONS.includes(decision)) return false;
    return this.outbox.command(decideFrame(approvalId, decision, more), approvalId);
  }

  /** Answer run `runId`'s message again (a sibling answer, then shown): an input like any other, as `submit`. */
  regenerate(runId) {
    return this.submit("", { regenerate: runId });
  }

  /** Send `text` as a new version of run `runId`'s message (a new branch), as `submit`. */
  edit(runId, text) {
    return this.submit(text, { editOf: runId });
  }

  /**
   * Show the branch through run `runId`: every tab follows (branch.switched).
   * @param {string} runId
   * @returns {boolean} whether the command was sent (else it goes once live)
   */
  switchTo(runId) {
    if (this.state === STATE.REJECTED || !runId) return false;
    return this.outbox.command({ type: P.SWITCH, run_id: runId }, runId);
  }

  /**
   * Cancel a run (the active one, or a queued one).
   * @param {string} [runId] default: the active run
   * @returns {boolean} whether the command was sent
   */
  cancel(runId) {
    const target = runId || activeRun(this.model)?.runId;
    if (this.state !== STATE.LIVE || !target) return false;
    return this.outbox.command({ type: P.CANCEL, run_id: target }, target);
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
}

// The state value's parts, read as the client's own fields (the view, snapshotOf, tests).
const READS = { state: "name", stateDetail: "detail", replayHead: "replayHead", lastResumeAfter: "resumeAfter", firstReplayedSeq: "firstReplayedSeq" };
for (const [name, key] of Object.entries(READS)) {
  Object.defineProperty(SessionClient.prototype, name, {
    get() {
      return this.current[key];
    },
  });
}
