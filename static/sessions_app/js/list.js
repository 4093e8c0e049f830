/**
 * The session list page, kept current by push: a socket to /ws/list/ (with
 * the session page's reconnect policy, socket.js) whose frames replace the
 * list (`sessions`, on every connect), one card (`session`) or remove one
 * (`session_gone`). Cards are built with the DOM API, never from HTML.
 *
 * @module list
 */

import { attachBrowserSignals, Connection, socketUrl } from "./client/socket.js";
import { pageUrls, urlFor } from "./client/urls.js";
import { h } from "./view/dom.js";
import { LIST_SESSION, LIST_SESSION_GONE, LIST_SESSIONS } from "./wire/constants.js";

/** How often "last activity" is written again. */
export const RELATIVE_TIME_MS = 30_000;

/**
 * "just now", "5 minutes ago", …, as the page renders it on the server.
 * @param {string} iso
 * @param {number} now ms since the epoch
 * @returns {string}
 */
export function ago(iso, now) {
  const s = Math.max(0, (now - Date.parse(iso)) / 1000);
  if (!Number.isFinite(s) || s < 60) return "just now";
  const units = [
    ["year", 365 * 86400],
    ["month", 30 * 86400],
    ["week", 7 * 86400],
    ["day", 86400],
    ["hour", 3600],
    ["minute", 60],
  ];
  for (const [name, size] of units) {
    const n = Math.floor(s / size);
    if (n >= 1) return `${n}\u00a0${name}${n === 1 ? "" : "s"} ago`;
  }
  return "just now";
}

/**
 * One session's card, as the server's template renders it.
 * @param {Document} doc
 * @param {{id: string, title: string, status: string, status_label: string, updated_at: string, pending_approvals: number, active_runs: number}} s
 * @param {number} now
 * @returns {HTMLElement} the list item
 */
export function card(doc, s, now) {
  const label = String(s.status_label || s.status || "");
  const badges = [];
  if (s.pending_approvals > 0) {
    const n = s.pending_approvals;
    badges.push(
      h(doc, "span", { class: "badge badge-warn", "data-testid": "pending-approvals", "data-count": n, text: `${n} pending approval${n === 1 ? "" : "s"}` }),
    );
  }
  // A run parked at its gate is waiting, not running: the status says so.
  if (s.active_runs > 0 && s.status !== "awaiting_approval")
    badges.push(h(doc, "span", { class: "badge badge-running", "data-testid": "running-badge", text: "running" }));
  const link = h(
    doc,
    "a",
    { class: "session-card", href: urlFor(pageUrls(doc), "session", s.id), "data-testid": "session-link", "data-session-id": s.id, "data-status": s.status },
    [
      h(doc, "span", { class: "session-card-main" }, [
        h(doc, "span", { class: "session-card-title", text: s.title || "Untitled session" }),
        h(doc, "span", { class: "session-card-meta" }, [
          h(doc, "span", { class: `status status-${s.status}`, text: label.charAt(0).toUpperCase() + label.slice(1) }),
          h(doc, "span", { "aria-hidden": "true", text: " · " }),
          h(doc, "span", {}, ["last activity ", h(doc, "time", { datetime: s.updated_at, text: ago(s.updated_at, now) })]),
        ]),
      ]),
      badges.length ? h(doc, "span", { class: "session-card-badges" }, badges) : null,
    ],
  );
  return h(doc, "li", { "data-updated-at": s.updated_at }, [link]);
}

/**
 * The list in the page, updated from frames.
 */
export class SessionList {
  /**
   * @param {Document} doc
   * @param {{now?: () => number}} [options]
   */
  constructor(doc, { now = Date.now } = {}) {
    this.doc = doc;
    this.now = now;
    this.main = doc.querySelector("main.list-wrap");
  }

  _ul() {
    let ul = this.main.querySelector("ul.session-list");
    if (!ul) {
      this.main.querySelector(".empty")?.remove();
      ul = h(this.doc, "ul", { class: "session-list", "aria-label": "Your sessions" });
      this.main.append(ul);
    }
    return ul;
  }

  _item(id) {
    const link = this.main.querySelector(`[data-testid=session-link][data-session-id="${CSS.escape(id)}"]`);
    return link ? link.closest("li") : null;
  }

  /**
   * Apply one frame of the list socket.
   * @param {object} frame
   */
  apply(frame) {
    if (frame.type === LIST_SESSIONS && Array.isArray(frame.sessions)) {
      const ul = this._ul();
      ul.replaceChildren(...frame.sessions.map((s) => card(this.doc, s, this.now())));
      // Said when the server cut the list short, never silently.
      const note = this.main.querySelector("[data-testid=list-truncated]");
      if (note) note.hidden = frame.truncated !== true;
      // Live from here on (the browser tests wait for it).
      this.doc.body.dataset.listLive = "true";
    } else if (frame.type === LIST_SESSION && frame.session && typeof frame.session.id === "string") {
      const fresh = card(this.doc, frame.session, this.now());
      this._item(frame.session.id)?.remove();
      // Most recent first: before the first card that is older.
      const ul = this._ul();
      const later = Array.from(ul.children).find((li) => (li.dataset.updatedAt || "") < frame.session.updated_at);
      ul.insertBefore(fresh, later || null);
    } else if (frame.type === LIST_SESSION_GONE && typeof frame.session_id === "string") {
      this._item(frame.session_id)?.remove();
    }
  }

  /** Write every "last activity" again. */
  tick() {
    for (const t of this.main.querySelectorAll("time[datetime]")) t.textContent = ago(t.getAttribute("datetime"), this.now());
  }
}

/** Start the list page: its socket and the periodic relative times. */
export function startListPage() {
  document.documentElement.dataset.app = "started"; // boot.js: the modules loaded
  const list = new SessionList(document);
  const conn = new Connection({
    url: socketUrl(window.location, urlFor(pageUrls(document), "ws_list")),
    handlers: {
      onFrame: (frame) => {
        conn.setReady();
        list.apply(frame);
      },
    },
  });
  attachBrowserSignals(conn, window, document);
  conn.start();
  setInterval(() => list.tick(), RELATIVE_TIME_MS);
  return { list, conn };
}

if (typeof document !== "undefined" && document.body && document.body.dataset.page === "list") {
  startListPage();
}
