/**
 * Rendering: the transcript model, the pending inputs, the queue, the
 * connection badge, presence and rejections. Implements the view interface
 * SessionClient drives (see session.js NULL_VIEW). No protocol logic here.
 *
 * DOM contract (kept stable for tests): see templates/sessions_app/session.html
 * and the data-testid attributes set below.
 *
 * @module ui
 */

import * as P from "./constants.js";
import { CONFIRMED, FAILED, SENT } from "./ledger.js";
import { MarkdownView } from "./markdown.js";
import { STATE } from "./session.js";
import { activeRun, queuedRuns } from "./transcript.js";

const STATE_LABELS = {
  connecting: "Connecting…",
  resuming: "Resuming…",
  live: "Live",
  reconnecting: "Reconnecting…",
  rejected: "Disconnected",
};

/** What each rejection says and which actions it offers. */
export const REJECTIONS = {
  [P.R_NOT_FOUND]: {
    badge: "Session not found",
    text: "This session does not exist, or it is not yours. Nothing was created in its place.",
    actions: ["back-to-list"],
  },
  [P.R_EPOCH_MISMATCH]: {
    badge: "History changed",
    text: "This session's history was rebuilt on the server, so what this tab shows is out of date. Reload it from the start to see the current history; messages you have not sent yet are kept.",
    actions: ["reload-from-zero", "back-to-list"],
  },
  [P.R_CURSOR_EXPIRED]: {
    badge: "History expired",
    text: "The server no longer keeps the part of this session that this tab is missing, so it cannot be continued here. Start a new session, or go back to the list.",
    actions: ["start-new-session", "back-to-list"],
  },
  [P.R_CURSOR_AHEAD]: {
    badge: "Out of step",
    text: "This tab has seen more of the session than the server now has (it was restored from a backup). Reload it from the start.",
    actions: ["reload-from-zero", "back-to-list"],
  },
  [P.R_BAD_REQUEST]: {
    badge: "Client error",
    text: "The server did not understand this tab's request to resume. Reload the page.",
    actions: ["reload-page", "back-to-list"],
  },
  [P.R_UNSUPPORTED_PROTOCOL]: {
    badge: "Update needed",
    text: "The server speaks a newer protocol than this page. Reload the page to get the current version.",
    actions: ["reload-page", "back-to-list"],
  },
  not_authenticated: {
    badge: "Signed out",
    text: "You are signed out. Sign in again to continue this session.",
    actions: ["sign-in", "back-to-list"],
  },
  protocol_violation: {
    badge: "Connection refused",
    text: "The server refused this tab's connection (protocol error). Reload the page.",
    actions: ["reload-page", "back-to-list"],
  },
};

/** How soon a batch is rendered when no animation frame comes (hidden tab). */
const FLUSH_FALLBACK_MS = 100;

const ACTION_IDS = ["reload-from-zero", "start-new-session", "sign-in", "reload-page", "back-to-list"];

/**
 * Create an element.
 * @param {Document} doc
 * @param {string} tag
 * @param {Record<string, string|number|boolean|null|undefined>} [attrs] "class", "text", data-*, aria-*, ...
 * @param {Array<Node|string>} [children]
 * @returns {HTMLElement}
 */
export function h(doc, tag, attrs = {}, children = []) {
  const el = doc.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = String(v);
    else if (k === "text") el.textContent = String(v);
    else if (k === "hidden") el.hidden = true;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children) if (c !== null && c !== undefined) el.append(c);
  return el;
}

function pretty(value) {
  if (typeof value === "string") return value;
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

/** The arguments of a tool call, readable: known tools get labelled fields. */
function argsBlock(doc, tool, args) {
  const a = args && typeof args === "object" ? args : {};
  if (tool === "terminal" && typeof a.command === "string") {
    return h(doc, "pre", { class: "code code-cmd" }, [h(doc, "code", { text: `$ ${a.command}` })]);
  }
  if (tool === "write_file" && typeof a.path === "string") {
    return h(doc, "div", { class: "tool-args" }, [
      h(doc, "div", { class: "kv" }, [h(doc, "span", { class: "k", text: "path" }), h(doc, "code", { class: "v", text: a.path })]),
      h(doc, "pre", { class: "code" }, [h(doc, "code", { text: pretty(a.text ?? "") })]),
    ]);
  }
  return h(doc, "pre", { class: "code" }, [h(doc, "code", { text: pretty(a) })]);
}

/** A one-line summary of a tool call's arguments. */
function argsSummary(tool, args) {
  const a = args && typeof args === "object" ? args : {};
  let text;
  if (tool === "terminal" && typeof a.command === "string") text = a.command;
  else if (tool === "write_file" && typeof a.path === "string") text = a.path;
  else text = pretty(a).replace(/\s+/g, " ");
  return text.length > 80 ? `${text.slice(0, 79)}…` : text;
}

const NOTICE_TEXT = {
  [P.STOP_CANCELLED]: "Run cancelled",
  [P.STOP_ERROR]: "Run failed",
  [P.STOP_INTERRUPTED]: "Run interrupted",
};

export class SessionView {
  /**
   * @param {Document} doc
   * @param {object} [options]
   * @param {() => number} [options.now]
   */
  constructor(doc, { now = Date.now } = {}) {
    this.doc = doc;
    this.now = now;
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
      composerError: q("composer-error"),
      title: q("session-title"),
      notice: q("notice"),
    };
    /** item key -> element */
    this.rows = new Map();
    /** changes taken, not yet rendered (see flush) */
    this._pending = [];
    this._pendingCursor = null;
    this._ledgerDirty = false;
    this._flushHandle = null;
    this.busy = { approval: new Set(), cancel: new Set() };
    this.state = STATE.CONNECTING;
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
    const frag = this.doc.createDocumentFragment();
    for (const item of model.items) {
      const el = this._build(item);
      this.rows.set(item.key, el);
      frag.append(el);
    }
    this.el.transcript.replaceChildren(frag);
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
    const win = this.doc.defaultView;
    const run = () => this.flush();
    const timer = setTimeout(run, FLUSH_FALLBACK_MS);
    const frame = win && typeof win.requestAnimationFrame === "function" ? win.requestAnimationFrame(run) : null;
    this._flushHandle = () => {
      clearTimeout(timer);
      if (frame !== null) win.cancelAnimationFrame(frame);
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
    let runs = false;
    let title = false;
    for (const c of changes) {
      if (c.op === "add") {
        added.add(c.item.key);
        const el = this._build(c.item);
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
      }
    }
    for (const [key, item] of grown) this._renderText(this.rows.get(key), item);
    for (const [key, item] of rebuild) {
      const old = this.rows.get(key);
      if (old && item.type === "assistant" && old.dataset.testid === "assistant-message") {
        // The final message: the same element, re-rendered in place.
        old.dataset.final = item.final ? "true" : "false";
        this._renderText(old, item);
        continue;
      }
      const el = this._build(item);
      this.rows.set(key, el);
      if (old) old.replaceWith(el);
      else frag.append(el);
    }
    if (frag.childNodes.length) this.el.transcript.append(frag);
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
  }

  /**
   * The row of one item. A row that fails to build shows its text plainly:
   * one message that cannot be rendered never hides another.
   */
  _build(item) {
    try {
      return this._buildRow(item);
    } catch {
      return h(this.doc, "p", {
        class: "row note",
        "data-seq": item.seq,
        "data-render": "failed",
        text: String(item.text ?? item.type ?? ""),
      });
    }
  }

  _buildRow(item) {
    const d = this.doc;
    switch (item.type) {
      case "note":
        return h(d, "p", { class: "row note", "data-seq": item.seq, "data-kind": "session.created", text: item.text });
      case "user":
        return h(
          d,
          "article",
          {
            class: "row msg msg-user",
            "data-seq": item.seq,
            "data-testid": "user-message",
            "data-client-message-id": item.cmid,
            "data-run-id": item.runId || "",
            "aria-label": "You",
          },
          [item.text],
        );
      case "assistant": {
        const el = h(d, "article", {
          class: "row msg msg-assistant",
          "data-seq": item.seq,
          "data-testid": "assistant-message",
          "data-run-id": item.runId || "",
          "data-final": item.final ? "true" : "false",
          "aria-label": "Agent",
        });
        this._renderText(el, item);
        return el;
      }
      case "tool":
        return h(
          d,
          "section",
          {
            class: "row card tool-call",
            "data-seq": item.seq,
            "data-testid": "tool-call",
            "data-tool-call-id": item.toolCallId,
            "data-tool": item.tool,
            "data-run-id": item.runId || "",
          },
          [
            h(d, "header", { class: "card-head" }, [
              h(d, "span", { class: "chip chip-tool", text: "Tool call" }),
              h(d, "strong", { text: item.tool }),
              h(d, "code", { class: "tool-summary", text: argsSummary(item.tool, item.args) }),
            ]),
            h(d, "details", { class: "tool-details" }, [h(d, "summary", { text: "Arguments" }), argsBlock(d, item.tool, item.args)]),
          ],
        );
      case "approval":
        return this._buildApproval(item);
      case "result":
        return h(
          d,
          "section",
          {
            class: `row card tool-result ${item.ok ? "ok" : "failed"}`,
            "data-seq": item.seq,
            "data-testid": "tool-result",
            "data-tool-call-id": item.toolCallId,
            "data-ok": item.ok ? "true" : "false",
            "data-run-id": item.runId || "",
          },
          [
            h(d, "header", { class: "card-head" }, [
              h(d, "span", { class: `chip ${item.ok ? "chip-ok" : "chip-fail"}`, text: item.ok ? "Result · ok" : "Result · failed" }),
            ]),
            h(d, "pre", { class: "code output" }, [h(d, "code", { text: item.output || "(no output)" })]),
          ],
        );
      case "notice": {
        let text = NOTICE_TEXT[item.stop] || `Run ended (${item.stop})`;
        if (item.stop === P.STOP_CANCELLED && item.queued) text = "Queued message cancelled";
        if (item.message) text += `: ${item.message}`;
        return h(d, "p", {
          class: `row notice notice-${item.stop}`,
          "data-seq": item.seq,
          "data-testid": "run-notice",
          "data-run-id": item.runId || "",
          "data-stop-reason": item.stop,
          text,
        });
      }
      default:
        return h(d, "p", { class: "row note", "data-seq": item.seq, text: "" });
    }
  }

  /**
   * Show an assistant item's text as Markdown in its element. The element
   * keeps the text as written in `sourceText` (what the log says, for the
   * tests); its DOM is the rendering.
   */
  _renderText(el, item) {
    if (!el) return;
    if (!el.markdown) el.markdown = new MarkdownView(this.doc, el);
    el.sourceText = item.text;
    // While it streams only its open chunk is lexed (markdown.js).
    el.markdown.render(item.text, { final: item.final !== false });
  }

  _buildApproval(item) {
    const d = this.doc;
    const pending = item.status === "pending";
    const busy = this.busy.approval.has(item.approvalId);
    const canAct = pending && this.state === STATE.LIVE && !busy;
    const approve = h(d, "button", {
      class: "btn btn-primary",
      type: "button",
      "data-testid": "approve",
      "data-action": "approve",
      "data-approval-id": item.approvalId,
      text: "Approve",
    });
    const deny = h(d, "button", {
      class: "btn btn-danger-outline",
      type: "button",
      "data-testid": "deny",
      "data-action": "deny",
      "data-approval-id": item.approvalId,
      text: "Deny",
    });
    approve.disabled = deny.disabled = !canAct;
    approve.hidden = deny.hidden = !pending;
    let statusText = "";
    if (pending)
      statusText = busy ? "Sending your decision…" : this.state === STATE.LIVE ? "Waiting for your decision" : "Waiting for the connection to decide";
    else statusText = `${item.status === "approved" ? "Approved" : "Denied"}${item.decidedBy ? ` by ${item.decidedBy}` : ""}`;
    return h(
      d,
      "section",
      {
        class: `row card approval approval-${item.status}`,
        "data-seq": item.seq,
        "data-testid": "approval",
        "data-approval-id": item.approvalId,
        "data-status": item.status,
        "data-run-id": item.runId || "",
        "aria-label": `Approval for ${item.tool}`,
      },
      [
        h(d, "header", { class: "card-head" }, [
          h(d, "span", { class: "chip chip-approval", text: pending ? "Approval needed" : "Approval" }),
          h(d, "strong", { text: item.tool }),
        ]),
        argsBlock(d, item.tool, item.args),
        h(d, "div", { class: "approval-foot" }, [
          h(d, "p", { class: "approval-status", "data-testid": "approval-decision", "data-decided-by": item.decidedBy || null, text: statusText }),
          h(d, "div", { class: "approval-actions" }, [deny, approve]),
        ]),
      ],
    );
  }

  _refreshApprovals() {
    if (!this.model) return;
    for (const item of this.model.items) {
      if (item.type !== "approval" || item.status !== "pending") continue;
      const old = this.rows.get(item.key);
      if (!old) continue;
      const hadFocus = old.contains(this.doc.activeElement) ? this.doc.activeElement.dataset.action : null;
      const el = this._buildApproval(item);
      old.replaceWith(el);
      this.rows.set(item.key, el);
      if (hadFocus) el.querySelector(`[data-action="${hadFocus}"]`)?.focus();
    }
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
    this.el.queue.replaceChildren(
      ...queue.map((q) =>
        h(d, "li", { class: "queue-item", "data-testid": "queued-item", "data-run-id": q.runId, "data-client-message-id": q.cmid }, [
          h(d, "span", { class: "queue-text", text: q.text }),
          h(d, "button", {
            class: "btn btn-ghost btn-small",
            type: "button",
            "data-action": "dequeue",
            "data-run-id": q.runId,
            "aria-label": `Remove “${q.text.slice(0, 40)}” from the queue`,
            text: "Remove",
          }),
        ]),
      ),
    );
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
    const busy = runId && this.busy.cancel.has(runId);
    this.el.cancel.disabled = !runId || this.state !== STATE.LIVE || !!busy;
    this.el.cancel.textContent = busy ? "Cancelling…" : "Cancel run";
    for (const btn of this.el.queue.querySelectorAll("button[data-action=dequeue]")) {
      btn.disabled = this.state !== STATE.LIVE || this.busy.cancel.has(btn.dataset.runId);
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
   * A decide / cancel is in flight (or no longer).
   * @param {"approval"|"cancel"} kind
   * @param {string} id
   * @param {boolean} busy
   */
  setBusy(kind, id, busy) {
    if (busy) this.busy[kind].add(id);
    else this.busy[kind].delete(id);
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
    const d = this.doc;
    const shown = entries.filter((e) => model.idx.user[e.id] === undefined);
    const status = (e) => {
      if (e.state === FAILED) return `Not sent: ${e.message || e.error}`;
      if (e.state === CONFIRMED) return "Delivered";
      if (this.state !== STATE.LIVE) return "Waiting for the connection…";
      return e.state === SENT ? "Sending…" : "Queued to send…";
    };
    this.el.pending.replaceChildren(
      ...shown.map((e) =>
        h(
          d,
          "li",
          { class: `row msg msg-user pending pending-${e.state}`, "data-testid": "pending-message", "data-client-message-id": e.id, "data-state": e.state },
          [
            h(d, "div", { class: "pending-text", text: e.text }),
            h(d, "div", { class: "pending-meta" }, [
              h(d, "span", { text: status(e) }),
              e.state === FAILED
                ? h(d, "button", {
                    class: "btn btn-ghost btn-small",
                    type: "button",
                    "data-action": "discard",
                    "data-client-message-id": e.id,
                    text: "Discard",
                  })
                : null,
            ]),
          ],
        ),
      ),
    );
    this._scroll();
  }

  // --- connection ------------------------------------------------------------------------

  /**
   * @param {string} state connecting | resuming | live | reconnecting | rejected
   * @param {{retryAt?: number, reason?: string, message?: string}} [detail]
   */
  setConnection(state, detail = {}) {
    const changed = state !== this.state;
    this.state = state;
    const badge = this.el.conn;
    badge.dataset.state = state;
    if (state === STATE.REJECTED) badge.dataset.reason = detail.reason || "unknown";
    else delete badge.dataset.reason;
    if (this._countdown) clearInterval(this._countdown);
    this._countdown = null;
    const label = () => {
      if (state === STATE.RECONNECTING && detail.retryAt) {
        const s = Math.ceil((detail.retryAt - this.now()) / 1000);
        return s >= 1 ? `Reconnecting in ${s} s` : "Reconnecting…";
      }
      if (state === STATE.REJECTED) return REJECTIONS[detail.reason]?.badge || STATE_LABELS.rejected;
      return STATE_LABELS[state] || state;
    };
    badge.textContent = label();
    if (state === STATE.RECONNECTING && detail.retryAt) {
      this._countdown = setInterval(() => {
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
    const panel = this.el.rejection;
    if (!detail) {
      panel.hidden = true;
      return;
    }
    const info = REJECTIONS[detail.reason] || { text: "This session cannot be resumed.", actions: ["reload-page", "back-to-list"] };
    let text = info.text;
    if (detail.reason === P.R_CURSOR_EXPIRED && Number.isInteger(detail.earliest)) text += ` (The server keeps events from #${detail.earliest} on.)`;
    if (detail.message && !text.includes(detail.message)) text += ` Server: “${detail.message}”`;
    this.el.rejectionMessage.textContent = text;
    for (const id of ACTION_IDS) {
      const el = panel.querySelector(`[data-testid="${id}"]`);
      if (!el) continue;
      const target = id === "start-new-session" ? el.closest("form") : el;
      target.hidden = !info.actions.includes(id);
    }
    panel.dataset.reason = detail.reason;
    panel.hidden = false;
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
    if (this._noticeTimer) clearTimeout(this._noticeTimer);
    this._noticeTimer = setTimeout(() => {
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
    if (typeof requestAnimationFrame === "function") requestAnimationFrame(run);
    else run();
  }
}
