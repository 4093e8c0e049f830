/**
 * The rejection panel: what a session that cannot be resumed says, and which
 * of the page's actions it offers (ui.js shows it when the state is rejected).
 *
 * @module rejection
 */

import * as P from "../wire/constants.js";

/**
 * What each rejection says and which actions it offers. (`epoch_mismatch` is
 * not here: the client recovers from it, as from `cursor_expired`, with a
 * notice; `cursor_expired` is here for a server that sends no `epoch` with it.)
 */
export const REJECTIONS = {
  [P.R_NOT_FOUND]: {
    badge: "Session not found",
    text: "This session does not exist, or it is not yours. Nothing was created in its place.",
    actions: ["back-to-list"],
  },
  [P.R_CURSOR_EXPIRED]: {
    badge: "History expired",
    text: "The server no longer keeps the part of this session that this tab is missing, so it cannot be continued here. Go back to the list to start another.",
    actions: ["back-to-list"],
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

const ACTION_IDS = ["reload-from-zero", "sign-in", "reload-page", "back-to-list"];

/**
 * The badge's text for a rejection `reason` (null: the generic one).
 * @param {string} reason
 * @returns {string|null}
 */
export function rejectionBadge(reason) {
  return REJECTIONS[reason]?.badge || null;
}

/**
 * Show `detail`'s rejection in `panel` (or hide it when `detail` is null).
 * @param {HTMLElement} panel
 * @param {HTMLElement} messageEl
 * @param {{reason: string, message?: string, earliest?: number}|null} detail
 */
export function showRejection(panel, messageEl, detail) {
  if (!detail) {
    panel.hidden = true;
    return;
  }
  const info = REJECTIONS[detail.reason] || { text: "This session cannot be resumed.", actions: ["reload-page", "back-to-list"] };
  let text = info.text;
  if (detail.reason === P.R_CURSOR_EXPIRED && Number.isInteger(detail.earliest)) text += ` (The server keeps events from #${detail.earliest} on.)`;
  if (detail.message && !text.includes(detail.message)) text += ` Server: “${detail.message}”`;
  messageEl.textContent = text;
  for (const id of ACTION_IDS) {
    const el = panel.querySelector(`[data-testid="${id}"]`);
    if (el) el.hidden = !info.actions.includes(id);
  }
  panel.dataset.reason = detail.reason;
  panel.hidden = false;
}
