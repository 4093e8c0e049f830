/**
 * Renaming a session from its page: the title in the header becomes a text
 * field (Enter saves with `PATCH /api/sessions/<id>/`, Escape cancels). Open
 * session lists follow by push (the server publishes the change).
 *
 * @module rename
 */

import { pageUrls, urlFor } from "../client/urls.js";
import * as P from "../wire/constants.js";
import { h } from "./dom.js";

/**
 * The CSRF token Django set in its cookie (for the API's session auth).
 * @param {Document} doc
 * @returns {string}
 */
export function csrfToken(doc) {
  const m = /(?:^|;\s*)csrftoken=([^;]+)/.exec(doc.cookie || "");
  return m ? decodeURIComponent(m[1]) : "";
}

/**
 * Wire the header's "Rename" button.
 * @param {Document} doc
 * @param {string} sessionId
 * @param {(message: string, level?: string) => void} notify
 * @param {typeof fetch} [fetchImpl]
 */
export function attachRename(doc, sessionId, notify, fetchImpl = globalThis.fetch) {
  const title = doc.querySelector("[data-testid=session-title]");
  const button = doc.querySelector("[data-testid=rename-session]");
  if (!title || !button) return;
  button.addEventListener("click", () => {
    if (title.hidden) return;
    const old = title.dataset.title || "";
    const input = h(doc, "input", {
      type: "text",
      class: "rename-input",
      "data-testid": "rename-input",
      maxlength: P.MAX_TITLE_CHARS,
      "aria-label": "Session title",
    });
    input.value = old;
    title.hidden = true;
    button.hidden = true;
    title.after(input);
    input.focus();
    input.select();
    const done = (text) => {
      input.remove();
      title.hidden = false;
      button.hidden = false;
      if (text !== null) show(doc, title, text);
      button.focus();
    };
    input.addEventListener("keydown", async (e) => {
      if (e.key === "Escape") {
        done(null);
      } else if (e.key === "Enter") {
        e.preventDefault();
        const text = input.value.trim();
        input.disabled = true;
        try {
          const r = await fetchImpl(urlFor(pageUrls(doc), "api_session", sessionId), {
            method: "PATCH",
            headers: { "Content-Type": "application/json", "X-CSRFToken": csrfToken(doc) },
            credentials: "same-origin",
            body: JSON.stringify({ title: text }),
          });
          if (!r.ok) throw new Error(`HTTP ${r.status}`);
          done((await r.json()).title ?? text);
        } catch (err) {
          done(null);
          notify(`Could not rename the session: ${err.message || err}`, "error");
        }
      }
    });
  });
}

function show(doc, title, text) {
  title.dataset.title = text;
  title.textContent = text || "Untitled session";
  doc.title = `${text || "Untitled session"} · Agent sessions`;
}
