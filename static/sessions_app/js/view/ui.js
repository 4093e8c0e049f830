/**
 * Rendering: the transcript model, the pending inputs, the queue, the
 * connection badge, presence and rejections. Implements the view interface
 * SessionClient drives (view.js). No protocol logic and no copy of the
 * client's state here: whether the session is live and whether a decision or
 * cancel is in flight are read from the client (`attach`); the calls only say
 * what changed. Timers and animation frames are injected (tests pass fakes).
 *
 * DOM contract (kept stable for tests): see templates/sessions_app/session.html
 * and the data-testid attributes set below.
 *
 * @module ui
 */

import { STATE } from "../client/view.js";
import { realTimers } from "../model/timers.js";
import { activeRun, queuedRuns } from "../model/transcript.js";
import { keepTyped, tickDeadline } from "./approval.js";
import { BranchView } from "./branchview.js";
import { rejectionBadge, showRejection } from "./rejection.js";
import { buildApproval, buildRow, pendingItem, queueItem, renderText } from "./rows.js";

const STATE_LABELS = {
  connecting: "Connecting…",
  resuming: "Resuming…",
  live: "Live",
  reconnecting: "Reconnecting…",
  rejected: "Disconnected",
};

/** How soon a batch is rendered when no animation frame comes (hidden tab). */
const FLUSH_FALLBACK_MS = 100;

/** Animation frames from the document's window (none: the fallback timer renders). */
function windowFrames(doc) {
  const win = doc.defaultView;
  if (!win || typeof win.requestAnimationFrame !== "function") return null;
  return { request: (fn) => win.requestAnimationFrame(fn), cancel: (id) => win.cancelAnimationFrame(id) };
}

export class SessionView {
  /**
   * @param {Document} doc
   * @param {object} [options]
   * @param {() => number} [options.now]
   * @param {import("../model/timers.js").Timers} [options.timers]
   * @param {{request: (fn: Function) => number, cancel: (id: number) => void}|null} [options.frames] animation frames
   */
  constructor(doc, { now = Date.now, timers = realTimers, frames = windowFrames(doc) } = {}) {
    this.doc = doc;
    this.now = now;
    this.timers = timers;
    this.frames = frames;
    /** the client this view shows (see attach) */
    this.client = null;
    const q = (id) => doc.querySelector(`[data-testid="${id}"]`);
    this.el = {
      transcript: q("transcript"),
      scroller: doc.querySelector(".transcript-scroll"),
      pending: q("pending-list"),
      queuePanel: q("queue-panel"),
      queue: q("queue"),
      runBar: q("run-bar"),
      runStatus: q("run-status"),
      cancel: q("cancel-run"),
      conn: q("connection-state"),
      running: q("running"),
      viewers: q("viewers"),
      rejection: q("rejection"),
      rejectionMessage: q("rejection-message"),
      composer: q("composer"),
      send: q("send"),
      stopAndSend: q("stop-and-send"),
      composerError: q("composer-error"),
      title: q("session-title"),
      notice: q("notice"),
    };
    /** item key -> element */
    this.rows = new Map();
    /** the active path's rows and their branch controls */
    this.branches = new BranchView(doc, this.rows);
    /** changes taken, not yet rendered (see flush) */
    this._pending = [];
    this._pendingCursor = null;
    this._ledgerDirty = false;
    this._flushHandle = null;
    this.presence = null;
    this.model = null;
    this.stick = true;
    this._scrollQueued = false;
    this._countdown = null;
    this._noticeTimer = null;
    if (this.el.scroller) {
      this.el.scroller.addEventListener(
        "scroll",
        () => {
          const s = this.el.scroller;
          this.stick = s.scrollHeight - s.scrollTop - s.clientHeight < 80;
        },
        { passive: true },
      );
    }
  }

  /**
   * The client whose state this view reads (`isLive`, `isBusy`).
   * @param {{isLive: boolean, isBusy: (kind: string, id: string) => boolean}} client
   */
  attach(client) {
    this.client = client;
  }

  get _live() {
    return !!this.client?.isLive;
  }

  /** What a row needs to know of the client now. */
  _ctx() {
    return { live: this._live, now: this.now(), busy: (kind, id) => !!this.client?.isBusy(kind, id) };
  }

  /** Cards with a deadline count down, a tick a second, while any is shown. */
  _watchDeadlines() {
    const shown = () => this.el.transcript.querySelectorAll("[data-testid=approval-deadline]");
    if (this._deadlines || !shown().length) return;
    this._deadlines = this.timers.setInterval(() => {
      const left = shown();
      for (const el of left) tickDeadline(el, this.now());
      if (!left.length) {
        this.timers.clearInterval(this._deadlines);
        this._deadlines = null;
      }
    }, 1000);
  }

  // --- transcript ----------------------------------------------------------------

  /**
   * Render a whole model (page load from the cache, reload from 0).
   * @param {object} model
   * @param {number} cursor
   */
  reset(model, cursor) {
    this._pending = [];
    this.model = model;
    this._ledgerModel = model;
    this.rows.clear();
    this.branches.reset();
    const frag = this.doc.createDocumentFragment();
    const ctx = this._ctx();
    for (const item of model.items) {
      const el = buildRow(this.doc, item, ctx);
      this.rows.set(item.key, el);
      frag.append(el);
    }
    this.el.transcript.replaceChildren(frag);
    this.branches.update(model, [], true);
    this._pendingCursor = cursor;
    this.flush();
    this._title(model);
    this._runs(model);
    this.stick = true;
    this._scroll();
  }

  /**
   * Take what one event changed. Rendered at the next animation frame, with
   * everything else that changed by then: a replay of thousands of events
   * costs one DOM update per frame, not one per event.
   * @param {Array<object>} changes from transcript.applyEvent
   * @param {object} model
   */
  applyChanges(changes, model) {
    this.model = model;
    for (const c of changes) this._pending.push(c);
    this._schedule();
  }

  /**
   * @param {number} cursor the committed cursor (shown with the frame that renders it)
   */
  setCursor(cursor) {
    this._pendingCursor = cursor;
    this._schedule();
  }

  _schedule() {
    if (this._flushHandle !== null) return;
    // The next frame, or shortly if frames are not coming (a hidden tab).
    const run = () => this.flush();
    const timer = this.timers.setTimeout(run, FLUSH_FALLBACK_MS);
    const frame = this.frames ? this.frames.request(run) : null;
    this._flushHandle = () => {
      this.timers.clearTimeout(timer);
      if (frame !== null) this.frames.cancel(frame);
    };
  }

  /** Render everything taken since the last frame, now. */
  flush() {
    if (this._flushHandle !== null) this._flushHandle();
    this._flushHandle = null;
    const changes = this._pending;
    this._pending = [];
    // Rows added in this batch are built once, from their current state; a
    // row that existed and changed is rebuilt once, after its appends.
    const added = new Set();
    const rebuild = new Map();
    const grown = new Map();
    const frag = this.doc.createDocumentFragment();
    const ctx = this._ctx();
    let runs = false;
    let title = false;
    let path = false;
    const built = [];
    for (const c of changes) {
      if (c.op === "add") {
        // A gate opened live (not replayed): the person may need telling.
        if (c.item.type === "approval" && c.item.status === "pending" && this.el.conn.dataset.state === STATE.LIVE) this.onGate?.(c.item);
        added.add(c.item.key);
        built.push(c.item);
        const el = buildRow(this.doc, c.item, ctx);
        this.rows.set(c.item.key, el);
        frag.append(el);
      } else if (c.op === "append") {
        // The item holds the whole text so far; rendered once below.
        if (!added.has(c.item.key) && !rebuild.has(c.item.key)) grown.set(c.item.key, c.item);
      } else if (c.op === "update") {
        if (added.has(c.item.key)) continue;
        grown.delete(c.item.key);
        rebuild.set(c.item.key, c.item);
      } else if (c.op === "runs") {
        runs = true;
      } else if (c.op === "title") {
        title = true;
      } else if (c.op === "path") {
        path = true;
      }
    }
    for (const [key, item] of grown) renderText(this.doc, this.rows.get(key), item);
    for (const [key, item] of rebuild) {
      const old = this.rows.get(key);
      if (old && item.type === "assistant" && old.dataset.testid === "assistant-message") {
        // The final message: the same element, re-rendered in place.
        old.dataset.final = item.final ? "true" : "false";
        renderText(this.doc, old, item);
        continue;
      }
      const el = buildRow(this.doc, item, ctx);
      this.rows.set(key, el);
      built.push(item);
      const refocus = old && item.type === "approval" ? keepTyped(old, el) : null;
      if (old) old.replaceWith(el);
      else frag.append(el);
      refocus?.();
    }
    if (frag.childNodes.length) this.el.transcript.append(frag);
    // Hidden off the path, and the branch controls where rows or runs changed.
    if (this.model && (built.length || path || runs)) this.branches.update(this.model, built, true);
    if (this.model && runs) this._runs(this.model);
    if (this.model && title) this._title(this.model);
    if (this._ledgerDirty) {
      this._ledgerDirty = false;
      this._renderLedger(this._lastLedger, this._ledgerModel);
    }
    if (this._pendingCursor !== null) {
      this.el.transcript.dataset.cursor = String(this._pendingCursor);
      this._pendingCursor = null;
    }
    if (changes.length) this._scroll();
    this._watchDeadlines();
  }

  _refreshApprovals() {
    if (!this.model) return;
    for (const item of this.model.items) {
      if (item.type !== "approval" || item.status !== "pending") continue;
      const old = this.rows.get(item.key);
      if (!old) continue;
      const hadFocus = old.contains(this.doc.activeElement) ? this.doc.activeElement.dataset.action : null;
      const el = buildApproval(this.doc, item, this._ctx());
      el.hidden = old.hidden;
      const refocus = keepTyped(old, el);
      old.replaceWith(el);
      refocus();
      this.rows.set(item.key, el);
      if (hadFocus) el.querySelector(`[data-action="${hadFocus}"]`)?.focus();
    }
  }

  /**
   * The session's title as the server has it now (resume_ok, a `title` frame):
   * shown at once, and what a rename starts from.
   * @param {string} title
   */
  setTitle(title) {
    const el = this.el.title;
    if (!el || el.dataset.title === title) return;
    el.dataset.title = title;
    el.textContent = title || "Untitled session";
    this.doc.title = `${title || "Untitled session"} · Agent sessions`;
  }

  _title(model) {
    // The server's title (renamed since, or named after the first message)
    // wins over the one the session was created with.
    if (model.title && this.el.title && !this.el.title.dataset.title) {
      this.el.title.textContent = model.title;
      this.doc.title = `${model.title} · Agent sessions`;
    }
  }

  // --- runs, queue, presence --------------------------------------------------------

  _runs(model) {
    const active = activeRun(model);
    const queue = queuedRuns(model);
    const d = this.doc;
    this.el.queue.replaceChildren(...queue.map((q) => queueItem(d, q)));
    this.el.queuePanel.hidden = queue.length === 0;
    this.el.runBar.hidden = !active;
    this.el.cancel.dataset.runId = active ? active.runId : "";
    if (active) {
      this.el.runStatus.textContent = active.status === "awaiting_approval" ? "Waiting for an approval" : "Agent is working…";
    }
    this._cancelButton();
    this._runningBadge();
  }

  _cancelButton() {
    const runId = this.el.cancel.dataset.runId;
    const { live, busy } = this._ctx();
    const cancelling = !!runId && busy("cancel", runId);
    this.el.cancel.disabled = !runId || !live || cancelling;
    this.el.cancel.textContent = cancelling ? "Cancelling…" : "Cancel run";
    // Beside Send while a run is active, where the server honours it.
    if (this.el.stopAndSend) this.el.stopAndSend.hidden = !runId || !this.client?.canInterrupt;
    for (const btn of this.el.queue.querySelectorAll("button[data-action=dequeue]")) {
      btn.disabled = !live || busy("cancel", btn.dataset.runId);
    }
  }

  _runningBadge() {
    let running;
    if (this.presence) running = this.presence.running;
    else running = !!(this.model && (activeRun(this.model) || queuedRuns(this.model).length));
    this.el.running.hidden = !running;
  }

  /**
   * @param {{viewers: number, running: boolean}} presence
   */
  setPresence(presence) {
    this.presence = presence;
    const others = Math.max(0, (presence.viewers || 0) - 1);
    this.el.viewers.dataset.count = String(others);
    this.el.viewers.dataset.viewers = String(presence.viewers || 0);
    this.el.viewers.textContent = others === 1 ? "1 other tab is viewing" : `${others} other tabs are viewing`;
    this.el.viewers.hidden = others === 0;
    this._runningBadge();
  }

  /**
   * A decide / cancel went in flight or came back (the client says which: `isBusy`).
   * @param {"approval"|"cancel"} kind
   * @param {string} _id
   * @param {boolean} _busy
   */
  setBusy(kind, _id, _busy) {
    if (kind === "approval") this._refreshApprovals();
    else this._cancelButton();
  }

  // --- pending inputs ------------------------------------------------------------------

  /**
   * Inputs the transcript does not show yet: pending (or failed) bubbles.
   * @param {Array<object>} entries ledger entries
   * @param {object} model
   */
  setLedger(entries, model) {
    // With the transcript's frame: a confirmed input leaves the pending list
    // in the frame its message appears in.
    this._lastLedger = entries;
    this._ledgerModel = model;
    this._ledgerDirty = true;
    this._schedule();
  }

  _renderLedger(entries, model) {
    const shown = entries.filter((e) => model.idx.user[e.id] === undefined);
    const live = this._live;
    this.el.pending.replaceChildren(...shown.map((e) => pendingItem(this.doc, e, live)));
    this._scroll();
  }

  // --- connection ------------------------------------------------------------------------

  /**
   * @param {string} state connecting | resuming | live | reconnecting | rejected
   * @param {{retryAt?: number, reason?: string, message?: string}} [detail]
   */
  setConnection(state, detail = {}) {
    const badge = this.el.conn;
    const changed = state !== badge.dataset.state;
    badge.dataset.state = state;
    if (state === STATE.REJECTED) badge.dataset.reason = detail.reason || "unknown";
    else delete badge.dataset.reason;
    if (this._countdown) this.timers.clearInterval(this._countdown);
    this._countdown = null;
    const label = () => {
      if (state === STATE.RECONNECTING && detail.retryAt) {
        const s = Math.ceil((detail.retryAt - this.now()) / 1000);
        return s >= 1 ? `Reconnecting in ${s} s` : "Reconnecting…";
      }
      if (state === STATE.REJECTED) return rejectionBadge(detail.reason) || STATE_LABELS.rejected;
      return STATE_LABELS[state] || state;
    };
    badge.textContent = label();
    if (state === STATE.RECONNECTING && detail.retryAt) {
      this._countdown = this.timers.setInterval(() => {
        badge.textContent = label();
      }, 250);
    }
    this._rejection(state === STATE.REJECTED ? detail : null);
    const rejected = state === STATE.REJECTED;
    this.el.composer.disabled = rejected;
    this.el.send.disabled = rejected;
    if (changed) {
      this._refreshApprovals();
      this._cancelButton();
      if (this._lastLedger && this.model) this.setLedger(this._lastLedger, this.model);
    }
  }

  _rejection(detail) {
    showRejection(this.el.rejection, this.el.rejectionMessage, detail);
  }

  // --- misc ------------------------------------------------------------------------------

  /**
   * A short message for the person (already decided, errors).
   * @param {string} message
   * @param {"info"|"error"} [level]
   */
  notify(message, level = "info") {
    const el = this.el.notice;
    el.textContent = message;
    el.dataset.level = level;
    el.hidden = false;
    if (this._noticeTimer) this.timers.clearTimeout(this._noticeTimer);
    this._noticeTimer = this.timers.setTimeout(() => {
      el.hidden = true;
    }, 6000);
  }

  /**
   * Show or clear the composer's error line.
   * @param {string|null} message
   */
  composerError(message) {
    this.el.composerError.textContent = message || "";
    this.el.composerError.hidden = !message;
  }

  _scroll() {
    if (!this.stick || this._scrollQueued || !this.el.scroller) return;
    this._scrollQueued = true;
    const run = () => {
      this._scrollQueued = false;
      const s = this.el.scroller;
      s.scrollTop = s.scrollHeight;
    };
    if (this.frames) this.frames.request(run);
    else run();
  }
}
