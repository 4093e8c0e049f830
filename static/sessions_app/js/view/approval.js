/**
 * An approval card: one gate (transcript.js's `approval` item) and what a
 * person may decide there. Approve, Deny (with a reason, told to the model),
 * Edit the arguments and run with them, or Respond instead (the text is the
 * call's result; the tool does not run); a step's cards decide it whole
 * (Approve all / Deny all) while more than one of it waits. A question with
 * a form (form.js) shows the form and Send answer / Decline instead, and
 * once answered, what was answered. Built from the item and `ctx` alone; `keepTyped` carries what a person typed into a card
 * over to the card built again in its place.
 *
 * @module approval
 */

import * as P from "../wire/constants.js";
import { argsBlock, legacyDisplay, pretty } from "./args.js";
import { h } from "./dom.js";
import { answerList, buildForm, formOf } from "./form.js";

function button(d, action, item, text, cls) {
  return h(d, "button", { class: `btn ${cls}`, type: "button", "data-testid": action, "data-action": action, "data-approval-id": item.approvalId, text });
}

/** Edit, or Respond instead: a folded form with its field and its button. */
function folded(d, item, { kind, label, field, action, submit }) {
  return h(d, "details", { class: "approval-more", "data-testid": kind }, [
    h(d, "summary", { text: label }),
    field,
    h(d, "div", { class: "approval-actions" }, [button(d, action, item, submit, "btn-primary")]),
  ]);
}

/** How long is left, as m:ss (h:mm:ss past an hour). */
export function timeLeft(ms) {
  const s = Math.max(0, Math.ceil(ms / 1000));
  const [h, m, sec] = [Math.floor(s / 3600), Math.floor((s % 3600) / 60), s % 60];
  const pad = (n) => String(n).padStart(2, "0");
  return h ? `${h}:${pad(m)}:${pad(sec)}` : `${m}:${pad(sec)}`;
}

/** A pending gate's deadline: the time left, and a warning in its last minute. */
export function deadline(d, expiresAt, now) {
  const el = h(d, "p", { class: "approval-deadline", "data-testid": "approval-deadline", "data-expires-at": expiresAt });
  tickDeadline(el, now);
  return el;
}

/** Bring a deadline's text up to `now` (the view ticks every second). */
export function tickDeadline(el, now) {
  const left = Date.parse(el.dataset.expiresAt) - now;
  const warn = left <= WARN_MS;
  el.classList.toggle("approval-expiring", warn);
  el.textContent = left > 0 ? `${warn ? "Expires soon: " : "Decide within "}${timeLeft(left)}` : "Deadline passed: expiring…";
}

/** A deadline warns in its last minute. */
const WARN_MS = 60_000;

function statusText(item, pending, busy, live) {
  if (pending) return busy ? "Sending your decision…" : live ? "Waiting for your decision" : "Waiting for the connection to decide";
  if (item.status === "cancelled") return "Cancelled: the conversation moved to another branch";
  const by = item.decidedBy ? ` by ${item.decidedBy}` : "";
  if (item.status === "edited") return `Approved with edited arguments${by}`;
  if (item.status === "answered" && item.decision === P.ANSWER) return `Answered${by}`;
  if (item.status === "answered") return `Answered instead${by}: ${item.response || ""}`;
  if (item.status === "expired") return "Expired: nobody decided in time";
  return `${item.status === "approved" ? "Approved" : "Denied"}${by}${item.reason ? `: ${item.reason}` : ""}`;
}

function chip(schema, pending) {
  if (schema) return pending ? "Your answer needed" : "Question";
  return pending ? "Approval needed" : "Approval";
}

/**
 * @param {Document} doc
 * @param {object} item an `approval` item
 * @param {import("./rows.js").RowContext} ctx
 * @returns {HTMLElement}
 */
export function buildApproval(doc, item, ctx) {
  const d = doc;
  const pending = item.status === "pending";
  const busy = ctx.busy("approval", item.approvalId);
  const canAct = pending && ctx.live && !busy;
  const cancelled = item.status === "cancelled";
  // A gated call may be edited or answered; a question only approved or denied,
  // or, with a form, answered.
  const call = pending && item.kind !== P.GATE_QUESTION;
  const schema = item.kind === P.GATE_QUESTION ? formOf(item.args) : null;
  const form = schema && pending ? buildForm(d, schema, !canAct, item.args.answer) : null;
  const note = schema ? String(item.args.message ?? "") : item.note;
  const reason = h(d, "input", {
    class: "approval-reason",
    type: "text",
    "data-testid": "deny-reason",
    maxlength: String(P.MAX_REASON_CHARS),
    placeholder: "Reason to deny (optional)",
    "aria-label": `Reason to deny ${item.tool}`,
  });
  const editArgs = h(d, "textarea", {
    class: "approval-field",
    "data-testid": "edit-args",
    rows: "4",
    "aria-label": `Arguments for ${item.tool}`,
    text: pretty(item.args ?? {}),
  });
  const respondText = h(d, "textarea", {
    class: "approval-field",
    "data-testid": "respond-text",
    rows: "3",
    maxlength: String(P.MAX_RESPONSE_CHARS),
    placeholder: "What the agent is told instead of running it",
    "aria-label": `Your answer instead of ${item.tool}`,
  });
  const whole = item.step && pending && item.stepPending > 1;
  const controls = [
    button(d, "approve", item, "Approve", "btn-primary"),
    button(d, "deny", item, "Deny", "btn-danger-outline"),
    button(d, "approve-all", item, `Approve all ${item.stepPending || ""}`.trim(), ""),
    button(d, "deny-all", item, "Deny all", "btn-danger-outline"),
  ];
  const [approve, deny, approveAll, denyAll] = controls;
  const send = form ? button(d, "answer-form", item, "Send answer", "btn-primary") : null;
  if (send) send.disabled = !canAct;
  if (schema) deny.textContent = "Decline";
  const edit = folded(d, item, { kind: "edit-call", label: "Edit", field: editArgs, action: "approve-edited", submit: "Run with these arguments" });
  const respond = folded(d, item, {
    kind: "respond-call",
    label: "Respond instead",
    field: respondText,
    action: "respond-instead",
    submit: "Send as the answer",
  });
  for (const el of [...controls, reason, editArgs, respondText, ...edit.querySelectorAll("button"), ...respond.querySelectorAll("button")])
    el.disabled = !canAct;
  approve.hidden = deny.hidden = reason.hidden = !pending;
  // A form is answered with its fields (approving would send its defaults).
  if (schema) approve.hidden = reason.hidden = true;
  approveAll.hidden = denyAll.hidden = !whole;
  edit.hidden = respond.hidden = !call;
  const shown =
    item.status === "edited" && item.editedArgs
      ? [h(d, "p", { class: "approval-note", text: "Ran with:" }), argsBlock(d, legacyDisplay(item), item.editedArgs)]
      : [];
  if (schema && item.answer) shown.push(answerList(d, schema, item.answer));
  return h(
    d,
    "section",
    {
      class: `row card approval approval-${item.status}`,
      "data-seq": item.seq,
      "data-testid": "approval",
      "data-approval-id": item.approvalId,
      "data-status": item.status,
      "data-kind": item.kind || P.GATE_APPROVAL,
      "data-step": item.step || null,
      "data-run-id": item.runId || "",
      "aria-label": `Approval for ${item.tool}`,
    },
    [
      h(d, "header", { class: "card-head" }, [h(d, "span", { class: "chip chip-approval", text: chip(schema, pending) }), h(d, "strong", { text: item.tool })]),
      // A form's card says what it asks (its note adds what approving answers: no Approve here).
      note ? h(d, "p", { class: schema ? "approval-ask" : "approval-note", "data-testid": "approval-note", text: note }) : null,
      // A form says what it asks itself: not its schema as JSON.
      schema ? form : argsBlock(d, legacyDisplay(item), item.args),
      ...shown,
      pending && item.expiresAt ? deadline(d, item.expiresAt, ctx.now ?? Date.now()) : null,
      h(d, "div", { class: "approval-foot" }, [
        h(d, "p", {
          class: "approval-status",
          "data-testid": "approval-decision",
          "data-decided-by": item.decidedBy || null,
          text: statusText(item, pending, busy, ctx.live),
        }),
        // A gate closed with its branch can never be decided: no buttons at all.
        h(d, "div", { class: "approval-actions" }, cancelled ? [] : [reason, deny, approve, send]),
        cancelled ? null : h(d, "div", { class: "approval-actions approval-step-actions" }, [denyAll, approveAll]),
      ]),
      cancelled ? null : edit,
      cancelled ? null : respond,
    ],
  );
}

/**
 * What a person typed into a card (a reason, edited arguments, a response,
 * a form's fields)
 * and which fold was open, carried over to the card built again in its
 * place (another tab's decision rebuilds a step's cards). Returns a function
 * to call once the new card is in the document: it gives back the focus and
 * the caret the person had.
 * @param {HTMLElement} old
 * @param {HTMLElement} el
 * @returns {() => void}
 */
export function keepTyped(old, el) {
  const twins = new Map(Array.from(el.querySelectorAll("[data-testid]"), (n) => [n.dataset.testid, n]));
  let refocus = () => {};
  for (const field of old.querySelectorAll("[data-testid]")) {
    const twin = twins.get(field.dataset.testid);
    if (!twin) continue;
    if (field.tagName === "DETAILS") twin.open = field.open;
    if (!["INPUT", "TEXTAREA", "SELECT"].includes(field.tagName)) continue;
    if (field.type === "checkbox") twin.checked = field.checked;
    else if (twin.value !== field.value) twin.value = field.value;
    if (old.ownerDocument.activeElement === field) {
      const [start, end] = [field.selectionStart, field.selectionEnd];
      refocus = () => {
        twin.focus();
        if (typeof start === "number" && twin.setSelectionRange) twin.setSelectionRange(start, end);
      };
    }
  }
  return refocus;
}
