/**
 * What a tab sends: inputs (from the send ledger), decisions, cancels and the
 * apply loop's syncs. One `Push` per request, as phoenix.js has one per
 * message: its kind, its target (the input's client_message_id, the approval
 * id, the run id), its frame, the request id it went out under on the current
 * socket (null when it is not on one) and whether the person sees it busy.
 *
 * - A `send` is re-sent after every resume until confirmed: the ledger keeps
 *   it (stored), so its push lasts one socket.
 * - A `decide` or `cancel` is remembered until it is answered, or its outcome
 *   (approval.decided, run.finished) is in the log: one lost with a socket
 *   goes again after the next resume. Repeating either is safe: the first
 *   decision stands, and a finished run is not_pending.
 * - An `internal_error` (the server did nothing) sends it again shortly.
 *
 * `Outbox` does the writing for `SessionClient`, which gives it the socket,
 * the ledger and the view; it touches no DOM.
 *
 * @module outbox
 */

import { hasUserMessage } from "../model/transcript.js";
import * as P from "../wire/constants.js";

/** How long after an `internal_error` a send, decide or cancel goes again. */
export const RETRY_AFTER_INTERNAL_ERROR_MS = 1000;

/**
 * Why `text` cannot be sent, or null.
 * @param {string} text
 * @returns {string|null}
 */
export function validateInput(text) {
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
 * A `decide` frame: a denial's `reason` (cut to the limit in code points,
 * as the server counts), an edit's `args`, a `response`, a form's `answer`,
 * `all` (its step).
 */
export function decideFrame(approvalId, decision, { reason = "", all = false, args = null, response = "", answer = null } = {}) {
  const frame = { type: P.DECIDE, approval_id: approvalId, decision };
  if (decision === P.DENY && reason) frame.reason = Array.from(reason).slice(0, P.MAX_REASON_CHARS).join("");
  if (decision === P.EDIT) frame.args = args;
  if (decision === P.RESPOND) frame.response = response;
  if (decision === P.ANSWER) frame.answer = answer;
  if (all) frame.all = true;
  return frame;
}

/** The view's name for what a busy push disables. */
const BUSY_KIND = { [P.DECIDE]: "approval", [P.CANCEL]: "cancel" };

/** One request: what it is about, and where it stands on the current socket. */
export class Push {
  /**
   * @param {string} kind a frame type: send | decide | cancel | sync
   * @param {string} target client_message_id | approval_id | run_id | request_id
   * @param {object} frame the frame without its request_id
   * @param {boolean} remember kept across sockets until settled
   */
  constructor(kind, target, frame, remember) {
    this.kind = kind;
    this.target = target;
    this.frame = frame;
    this.remember = remember;
    /** @type {string|null} the request id on the current socket */
    this.requestId = null;
    this.busy = false;
  }

  get key() {
    return `${this.kind}:${this.target}`;
  }
}

export class Outbox {
  /**
   * @param {object} options
   * @param {(frame: object, onWritten?: Function) => boolean} options.send write on the current socket
   * @param {() => string} options.requestId
   * @param {() => boolean} options.live whether the session is live (commands may go)
   * @param {import("./ledger.js").Ledger} options.ledger
   * @param {object} options.view SessionClient's view
   * @param {() => object} options.model the transcript model (for the view)
   * @param {() => void} options.onSyncError a sync failed (the apply loop's)
   * @param {import("../model/timers.js").Timers} options.timers
   * @param {(entry: {id: string}) => void} [options.onWritten] an input's frame was written
   */
  constructor({ send, requestId, live, ledger, view, model, onSyncError, timers, onWritten = () => {} }) {
    this._onSyncError = onSyncError;
    this._onWritten = onWritten;
    this._send = send;
    this._requestId = requestId;
    this._live = live;
    this.ledger = ledger;
    this.view = view;
    this._model = model;
    this.timers = timers;
    /** @type {Map<string, Push>} by kind:target */
    this.pushes = new Map();
    /** @type {Map<string, Push>} by the request id it went out under */
    this.requests = new Map();
    this._retryTimer = null;
    /** Whether this tab is visible, as last said to the server (`visibility`). */
    this.visible = true;
  }

  /**
   * The tab was shown or hidden: the server is told (a person none of whose
   * tabs is visible is told of a gate that waits), now if live, else when
   * the next socket goes live (`flushCommands`).
   * @param {boolean} visible
   */
  setVisible(visible) {
    if (visible === this.visible) return;
    this.visible = visible;
    if (this._live()) this._send({ type: P.VISIBILITY, visible });
  }

  // --- the table ------------------------------------------------------------------

  /**
   * Whether the person sees `target` busy ("approval" or "cancel").
   * @param {"approval"|"cancel"} kind
   * @param {string} id
   * @returns {boolean}
   */
  isBusy(kind, id) {
    const push = this.pushes.get(`${kind === "approval" ? P.DECIDE : P.CANCEL}:${id}`);
    return !!push?.busy;
  }

  _setBusy(push, busy) {
    if (push.busy === busy) return;
    push.busy = busy;
    const kind = BUSY_KIND[push.kind];
    if (kind) this.view.setBusy(kind, push.target, busy);
  }

  /**
   * Write `push` on the current socket under a new request id; false (and
   * not on the socket) when no socket is open: a remembered push waits for
   * the next resume.
   */
  _write(push, onWritten) {
    const requestId = this._requestId();
    if (push.requestId !== null) this.requests.delete(push.requestId);
    push.requestId = requestId;
    this.pushes.set(push.key, push);
    this.requests.set(requestId, push);
    if (this._send({ ...push.frame, request_id: requestId }, onWritten)) return true;
    this.requests.delete(requestId);
    push.requestId = null;
    if (!push.remember) this.pushes.delete(push.key);
    return false;
  }

  /** `push` is done: answered, settled by the log, or failed for good. */
  _done(push) {
    if (this.pushes.get(push.key) === push) this.pushes.delete(push.key);
    if (push.requestId !== null) this.requests.delete(push.requestId);
    push.requestId = null;
    this._setBusy(push, false);
  }

  /**
   * A sync the apply loop wrote (its frame carries its own request id).
   * @param {object} frame
   */
  sync(frame) {
    const push = new Push(P.SYNC, frame.request_id, frame, false);
    push.requestId = frame.request_id;
    this.requests.set(frame.request_id, push);
    this._send(frame);
  }

  /** The socket is gone: nothing is on it; commands wait for the next resume. */
  detach() {
    this.requests.clear();
    for (const push of Array.from(this.pushes.values())) {
      push.requestId = null;
      this._setBusy(push, false);
      if (!push.remember) this.pushes.delete(push.key);
    }
  }

  /** Forget every command too (the transcript was rebuilt from the server). */
  clear() {
    this.detach();
    this.pushes.clear();
  }

  // --- inputs ---------------------------------------------------------------------

  /**
   * A new input: validated, recorded in the ledger (stored) before anything
   * is written, sent now if the session is live.
   * @param {string} text ("" for a regenerate)
   * @param {{interrupt?: boolean, regenerate?: string, editOf?: string}} [options]
   *   interrupt: stop the active run and start this at once; regenerate: answer
   *   that run's message again; editOf: a new version of that run's message
   * @returns {{ok: true, id: string}|{ok: false, error: string}}
   */
  submit(text, options = {}) {
    const problem = options.regenerate ? null : validateInput(text);
    if (problem) return { ok: false, error: problem };
    const entry = this.ledger.prepare(text, options);
    this._showLedger();
    this.flushLedger();
    return { ok: true, id: entry.id };
  }

  /** @param {string} id a failed input to remove */
  discard(id) {
    if (this.ledger.discard(id)) this._showLedger();
  }

  /** Forget confirmed inputs the transcript shows. */
  pruneLedger() {
    this.ledger.prune((id) => hasUserMessage(this._model(), id));
  }

  _showLedger() {
    this.view.setLedger(this.ledger.entries(), this._model());
  }

  /**
   * A reply to a command: send_ok, decide_ok, cancel_ok or switch_ok. A card
   * or run changes with its event (approval.decided, run.finished,
   * branch.switched), not with the reply.
   * @param {object} frame
   */
  reply(frame) {
    if (frame.type === P.SEND_OK) return this.sendOk(frame);
    this.answered(frame.request_id);
    if (frame.type === P.SWITCH_OK) this.settle(P.SWITCH, frame.run_id);
  }

  /**
   * What an applied event settles: the input it logs (its user.message, or a
   * regenerate's run.started / run.queued) is confirmed; a decision or
   * cancel whose outcome it is goes no more.
   * @param {{kind: string, run_id?: string|null, seq: number, data?: object}} ev
   */
  logged(ev) {
    const d = ev.data || {};
    const regenerated = (ev.kind === P.K_RUN_STARTED || ev.kind === P.K_RUN_QUEUED) && d.regenerates;
    if ((ev.kind === P.K_USER_MESSAGE || regenerated) && d.client_message_id) {
      this.ledger.confirm(d.client_message_id, { seq: ev.seq, run_id: ev.run_id });
      this.pruneLedger();
      this._showLedger();
    } else if (ev.kind === P.K_APPROVAL_DECIDED && d.approval_id) {
      this.settle(P.DECIDE, d.approval_id);
    } else if (ev.kind === P.K_RUN_FINISHED && ev.run_id) {
      this.settle(P.CANCEL, ev.run_id);
    }
  }

  /** @param {object} frame a `send_ok` */
  sendOk(frame) {
    this.answered(frame.request_id);
    if (!frame.client_message_id) return;
    this.ledger.confirm(frame.client_message_id, { seq: frame.seq, run_id: frame.run_id, status: frame.status });
    this.pruneLedger();
    this._showLedger();
  }

  /** Write every unconfirmed input not yet written on this socket, in order. */
  flushLedger() {
    if (!this._live()) return;
    for (const entry of this.ledger.unconfirmed()) {
      if (!this._live()) return;
      if (this.pushes.get(`${P.SEND}:${entry.id}`)?.requestId) continue;
      const frame = entry.regenerate
        ? { type: P.SEND, client_message_id: entry.id, regenerate: entry.regenerate }
        : { type: P.SEND, client_message_id: entry.id, text: entry.text };
      // Sent again with it after a drop: the server stops a run for it once
      // (a repeat of the id is a duplicate and stops nothing).
      if (entry.interrupt) frame.interrupt = true;
      if (entry.editOf) frame.edit_of = entry.editOf;
      const push = new Push(P.SEND, entry.id, frame, false);
      if (!this._write(push, () => this.written(entry))) return;
    }
  }

  /**
   * An input's frame was written: marked sent, then told to `onWritten`.
   * @param {{id: string}} entry
   */
  written(entry) {
    this.ledger.markSent(entry.id);
    this._showLedger();
    this._onWritten(entry);
  }

  // --- commands -------------------------------------------------------------------

  /**
   * Send a decide or cancel, remembered until it is settled.
   * @param {object} frame without request_id
   * @param {string} target
   * @returns {boolean} whether it was written
   */
  command(frame, target) {
    const push = this.pushes.get(`${frame.type}:${target}`) || new Push(frame.type, target, frame, true);
    push.frame = frame;
    this.pushes.set(push.key, push);
    if (!this._write(push)) return false;
    this._setBusy(push, true);
    return true;
  }

  /** Send every remembered decide / cancel that is not on this socket (and
   * whether the tab is visible: a socket that never says is no one looking). */
  flushCommands() {
    this._send({ type: P.VISIBILITY, visible: this.visible });
    for (const push of Array.from(this.pushes.values())) {
      if (!push.remember || push.requestId !== null) continue;
      if (!this._write(push)) return;
      this._setBusy(push, true);
    }
  }

  /**
   * The log says how it ended (approval.decided, run.finished): nothing to
   * send again.
   * @param {string} kind decide | cancel
   * @param {string} target
   */
  settle(kind, target) {
    const push = this.pushes.get(`${kind}:${target}`);
    if (!push) return;
    // Not sent again, and not busy; its reply, if one is on the way (say
    // already_decided, when another tab's decision came first), still finds it.
    this.pushes.delete(push.key);
    this._setBusy(push, false);
  }

  // --- replies --------------------------------------------------------------------

  /**
   * A reply that answers a request (send_ok, decide_ok, cancel_ok, sync_ok).
   * @param {string} requestId
   * @returns {Push|undefined} the push it answered
   */
  answered(requestId) {
    const push = this.requests.get(requestId);
    if (!push) return push;
    if (push.remember) {
      // A decide or cancel the server took: never sent again, but busy until
      // its outcome is in the log (settle), which may come after the reply.
      this.requests.delete(requestId);
      push.requestId = null;
      push.remember = false;
      return push;
    }
    this._done(push);
    return push;
  }

  /**
   * An `error` frame. Returns what it failed and the person should hear of,
   * or null (retried, or it answered nothing of ours).
   * @param {object} frame
   * @returns {Push|null}
   */
  failed(frame) {
    const push = this.requests.get(frame.request_id);
    if (!push) return null;
    if (push.kind !== P.SYNC && frame.code === P.E_INTERNAL) {
      // The server failed on it (say, its database restarting) and did
      // nothing: a send is idempotent by its client_message_id and a decide
      // or cancel by its target, so it goes again shortly, as after a resume.
      this.requests.delete(frame.request_id);
      push.requestId = null;
      if (!push.remember) this.pushes.delete(push.key);
      this._scheduleRetry();
      return null;
    }
    this._done(push);
    return push;
  }

  /**
   * An `error` frame: retried (internal_error), or the person hears of it.
   * @param {object} frame
   */
  error(frame) {
    const known = this.requests.has(frame.request_id);
    const push = this.failed(frame);
    if (!known) {
      console.warn("server error", frame);
      return;
    }
    if (!push) return; // an internal error: it goes again shortly
    const message = String(frame.message || frame.code || "error");
    if (push.kind === P.SYNC) {
      this._onSyncError();
    } else if (push.kind === P.SEND) {
      this.ledger.fail(push.target, String(frame.code || "error"), message);
      this._showLedger();
    } else if (push.kind === P.DECIDE) {
      if (frame.code === P.E_APPROVAL_CANCELLED) {
        this.view.notify("This approval was cancelled: the conversation moved to another branch.", "info");
      } else if (frame.code === P.E_ALREADY_DECIDED) {
        const verb =
          { [P.APPROVE]: "approved", [P.EDIT]: "approved with edits", [P.RESPOND]: "answered", [P.ANSWER]: "answered", [P.GATE_EXPIRED]: "expired" }[
            frame.decision
          ] || "denied";
        this.view.notify(`Already ${verb}${frame.decided_by ? ` by ${frame.decided_by}` : ""}.`, "info");
      } else {
        this.view.notify(`Could not record the decision: ${message}`, "error");
      }
    } else if (push.kind === P.CANCEL && frame.code !== P.E_NOT_PENDING) {
      this.view.notify(`Could not cancel: ${message}`, "error");
    } else if (push.kind === P.SWITCH) {
      this.view.notify(`Could not switch branches: ${message}`, "error");
    }
  }

  _scheduleRetry() {
    if (this._retryTimer !== null) return;
    this._retryTimer = this.timers.setTimeout(() => {
      this._retryTimer = null;
      if (!this._live()) return; // the next resume sends them
      this.flushLedger();
      this.flushCommands();
    }, RETRY_AFTER_INTERNAL_ERROR_MS);
  }
}
