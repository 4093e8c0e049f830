/**
 * Editing a sent message in place: the message turns into a text box
 * (`[data-testid=edit-input]`); Enter sends the new version, Escape gives
 * the message back, Shift+Enter adds a line. What is sent is the caller's
 * (`onSend`: SessionClient.edit, a ledger input like any other).
 *
 * @module editor
 */

import { h } from "./dom.js";

/**
 * Open the editor on a user message's row (or focus the one already open).
 * @param {Document} doc
 * @param {HTMLElement} row the `[data-testid=user-message]` element
 * @param {(text: string) => {ok: boolean, error?: string}} onSend
 * @returns {HTMLTextAreaElement}
 */
export function openEditor(doc, row, onSend) {
  const open = row.querySelector("[data-testid=edit-input]");
  if (open) {
    open.focus();
    return open;
  }
  const body = row.querySelector(":scope > .msg-body");
  const tools = row.querySelector(":scope > .msg-tools");
  const input = h(doc, "textarea", {
    class: "edit-input",
    "data-testid": "edit-input",
    rows: 2,
    "aria-label": "Edit your message: Enter sends, Escape cancels, Shift+Enter adds a line",
  });
  input.value = body ? body.textContent : "";
  const problem = h(doc, "p", { class: "edit-error", "data-testid": "edit-error", role: "alert", hidden: true });
  const hint = h(doc, "p", { class: "edit-hint", text: "Enter to send as a new version · Escape to cancel" });
  const box = h(doc, "div", { class: "edit-box" }, [input, problem, hint]);
  const close = () => {
    box.remove();
    if (body) body.hidden = false;
    if (tools) tools.hidden = false;
  };
  input.addEventListener("keydown", (e) => {
    if (e.key === "Escape") {
      e.preventDefault();
      close();
    } else if (e.key === "Enter" && !e.shiftKey && !e.altKey && !e.ctrlKey && !e.metaKey && !e.isComposing) {
      e.preventDefault();
      const result = onSend(input.value);
      if (result.ok) close();
      else {
        problem.textContent = result.error || "This cannot be sent.";
        problem.hidden = false;
      }
    }
  });
  if (body) body.hidden = true;
  if (tools) tools.hidden = true;
  row.append(box);
  input.focus();
  input.setSelectionRange(input.value.length, input.value.length);
  return input;
}
