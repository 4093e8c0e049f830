/**
 * The transcript's rows: one element per item of the model (transcript.js),
 * built from the item and what the client says now (`ctx`: whether it is
 * live, whether a decision or cancel is in flight). No state of its own.
 *
 * @module rows
 */

import { CONFIRMED, FAILED, SENT } from "../client/ledger.js";
import * as P from "../wire/constants.js";
import { buildApproval } from "./approval.js";
import { argsBlock, argsSummary, legacyDisplay } from "./args.js";
import { h } from "./dom.js";
import { MarkdownView } from "./markdown.js";

/**
 * @typedef {object} RowContext
 * @property {boolean} live whether the session is live (decisions may go)
 * @property {(kind: "approval"|"cancel", id: string) => boolean} busy whether one is in flight
 */

const NOTICE_TEXT = {
  [P.STOP_CANCELLED]: "Run cancelled",
  [P.STOP_ERROR]: "Run failed",
  [P.STOP_INTERRUPTED]: "Run interrupted",
};

/**
 * The row of one item. A row that fails to build shows its text plainly:
 * one message that cannot be rendered never hides another.
 */
export function buildRow(doc, item, ctx) {
  try {
    return row(doc, item, ctx);
  } catch {
    return h(doc, "p", {
      class: "row note",
      "data-seq": item.seq,
      "data-render": "failed",
      text: String(item.text ?? item.type ?? ""),
    });
  }
}

function row(doc, item, ctx) {
  const d = doc;
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
        [
          h(d, "div", { class: "msg-body", text: item.text }),
          // Controls carry no text of their own (their labels are CSS and
          // aria-label): the message's text is its element's text.
          h(d, "div", { class: "msg-tools" }, [
            h(d, "button", {
              class: "icon-btn icon-edit",
              type: "button",
              "data-testid": "edit-message",
              "data-action": "edit",
              "data-run-id": item.runId || "",
              "aria-label": "Edit this message",
              title: "Edit",
            }),
          ]),
        ],
      );
    case "assistant": {
      const el = h(
        d,
        "article",
        {
          class: "row msg msg-assistant",
          "data-seq": item.seq,
          "data-testid": "assistant-message",
          "data-run-id": item.runId || "",
          "data-final": item.final ? "true" : "false",
          "aria-label": "Agent",
        },
        [h(d, "div", { class: "msg-body" })],
      );
      renderText(doc, el, item);
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
            h(d, "code", { class: "tool-summary", text: argsSummary(legacyDisplay(item), item.args) }),
          ]),
          h(d, "details", { class: "tool-details" }, [h(d, "summary", { text: "Arguments" }), argsBlock(d, legacyDisplay(item), item.args)]),
        ],
      );
    case "approval":
      return buildApproval(doc, item, ctx);
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
    case "resumed":
      // Quiet: the answer goes on where it was, nothing to do.
      return h(d, "p", {
        class: "row note note-resumed",
        "data-seq": item.seq,
        "data-testid": "run-resumed",
        "data-run-id": item.runId || "",
        "data-reason": item.reason || "",
        text: item.reason === P.RESUMED_HANDOVER ? "Resumed on another server (a deploy)" : "Resumed after a server restart",
      });
    default:
      return h(d, "p", { class: "row note", "data-seq": item.seq, text: "" });
  }
}

/**
 * Show an assistant item's text as Markdown in its element. The element
 * keeps the text as written in `sourceText` (what the log says, for the
 * tests); its DOM is the rendering.
 */
export { buildApproval };

export function renderText(doc, el, item) {
  if (!el) return;
  if (!el.markdown) el.markdown = new MarkdownView(doc, el.querySelector(":scope > .msg-body") || el);
  el.sourceText = item.text;
  // While it streams only its open chunk is lexed (markdown.js).
  el.markdown.render(item.text, { final: item.final !== false });
}

/**
 * A queued message (a run not started yet), with its "Remove" button.
 * @param {Document} d
 * @param {{runId: string, cmid: string, text: string}} q
 * @returns {HTMLElement}
 */
export function queueItem(d, q) {
  return h(d, "li", { class: "queue-item", "data-testid": "queued-item", "data-run-id": q.runId, "data-client-message-id": q.cmid }, [
    h(d, "span", { class: "queue-text", text: q.text }),
    h(d, "button", {
      class: "btn btn-ghost btn-small",
      type: "button",
      "data-action": "dequeue",
      "data-run-id": q.runId,
      "aria-label": `Remove “${q.text.slice(0, 40)}” from the queue`,
      text: "Remove",
    }),
  ]);
}

/**
 * An input the transcript does not show yet (the send ledger's entry).
 * @param {Document} d
 * @param {{id: string, text: string, state: string, message?: string, error?: string}} e
 * @param {boolean} live
 * @returns {HTMLElement}
 */
export function pendingItem(d, e, live) {
  let status;
  if (e.state === FAILED) status = `Not sent: ${e.message || e.error}`;
  else if (e.state === CONFIRMED) status = "Delivered";
  else if (!live) status = "Waiting for the connection…";
  else status = e.state === SENT ? "Sending…" : "Queued to send…";
  return h(
    d,
    "li",
    { class: `row msg msg-user pending pending-${e.state}`, "data-testid": "pending-message", "data-client-message-id": e.id, "data-state": e.state },
    [
      h(d, "div", { class: "pending-text", text: e.regenerate ? "Regenerate the answer" : e.text }),
      h(d, "div", { class: "pending-meta" }, [
        h(d, "span", { text: status }),
        e.state === FAILED
          ? h(d, "button", { class: "btn btn-ghost btn-small", type: "button", "data-action": "discard", "data-client-message-id": e.id, text: "Discard" })
          : null,
      ]),
    ],
  );
}

/**
 * The "‹ i/n ›" of a message with siblings (paths.js `branchControls`); its
 * buttons name the run to switch to. The "i/n" is CSS (attr), not text.
 * @param {Document} d
 * @param {import("../model/paths.js").Control} c
 * @returns {HTMLElement}
 */
export function branchNav(d, c) {
  const button = (testid, target, label) => {
    const b = h(d, "button", {
      class: `icon-btn icon-${testid}`,
      type: "button",
      "data-testid": testid,
      "data-action": "branch",
      "data-run-id": target || "",
      "aria-label": label,
      title: label,
    });
    b.disabled = !target;
    return b;
  };
  return h(
    d,
    "span",
    {
      class: "branch-nav",
      "data-testid": "branch-nav",
      "data-branch": c.kind,
      "data-index": c.index,
      "data-count": c.count,
      "data-run-id": c.runId,
      role: "group",
      "aria-label": `${c.kind === "user" ? "Version" : "Answer"} ${c.index} of ${c.count}`,
    },
    [button("branch-prev", c.prev, "Previous version"), button("branch-next", c.next, "Next version")],
  );
}

/**
 * "Regenerate" for the last answer of a finished run.
 * @param {Document} d
 * @param {string} runId
 * @returns {HTMLElement}
 */
export function regenerateButton(d, runId) {
  return h(d, "button", {
    class: "icon-btn icon-regenerate",
    type: "button",
    "data-testid": "regenerate",
    "data-action": "regenerate",
    "data-run-id": runId,
    "aria-label": "Regenerate this answer",
    title: "Regenerate",
  });
}
