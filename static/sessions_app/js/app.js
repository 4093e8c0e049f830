/**
 * Page wiring: reads what the server rendered (session id, test hooks),
 * builds the store, the client and the view, and connects the controls.
 *
 * @module app
 */

import { SessionClient } from "./client/session.js";
import { attachBrowserSignals, Connection, socketUrl } from "./client/socket.js";
import { MemoryStorage, SessionStore } from "./client/store.js";
import { pageUrls, urlFor } from "./client/urls.js";
import { Failpoints, failpointHooks, hooksEnabled, installTestHooks } from "./hooks.js";
import { openEditor } from "./view/editor.js";
import { readForm } from "./view/form.js";
import { gateNotifier, offerNotifications } from "./view/notify.js";
import { attachRename } from "./view/rename.js";
import { SessionView } from "./view/ui.js";

/** @returns {Storage} this tab's sessionStorage, or a memory stand-in if it is unusable */
function tabStorage() {
  try {
    const s = window.sessionStorage;
    const probe = "agent.probe";
    s.setItem(probe, "1");
    s.removeItem(probe);
    return s;
  } catch {
    return new MemoryStorage();
  }
}

/** Start the session page. */
export function startSessionPage() {
  // boot.js: the modules loaded; a failed load no longer needs a reload.
  document.documentElement.dataset.app = "started";
  try {
    sessionStorage.removeItem("agent.boot.reloads");
  } catch {
    // no storage
  }
  const body = document.body;
  const sessionId = body.dataset.sessionId;
  const store = new SessionStore(tabStorage(), { onError: (err) => console.warn("session storage:", err) });
  const tabId = store.tabId(window);
  const view = new SessionView(document);
  view.onGate = gateNotifier(window);
  offerNotifications(window, document.querySelector("[data-testid=notify-me]"));
  const failpoints = hooksEnabled(document) ? new Failpoints() : null;
  let detachSignals = () => {};

  const client = new SessionClient({
    sessionId,
    tabId,
    store,
    view,
    hooks: failpoints ? failpointHooks(failpoints, () => client) : undefined,
    createConnection: (handlers) => {
      const conn = new Connection({ url: socketUrl(window.location, urlFor(pageUrls(document), "ws_sessions")), handlers });
      detachSignals = attachBrowserSignals(conn, window, document);
      return conn;
    },
  });
  if (failpoints) installTestHooks(window, client, failpoints);

  // --- composer -------------------------------------------------------------------
  const composer = view.el.composer;
  const form = document.querySelector('[data-testid="composer-form"]');
  const grow = () => {
    composer.style.height = "auto";
    composer.style.height = `${Math.min(composer.scrollHeight, 220)}px`;
  };
  const submit = (options = {}) => {
    const text = composer.value;
    if (!text.trim()) return;
    const result = client.submit(text, options);
    if (result.ok) {
      composer.value = "";
      grow();
      view.composerError(null);
      view.stick = true;
    } else {
      view.composerError(result.error);
    }
  };
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    submit();
    composer.focus();
  });
  composer.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.altKey && !e.ctrlKey && !e.metaKey && !e.isComposing) {
      e.preventDefault();
      submit();
    }
  });
  composer.addEventListener("input", () => {
    grow();
    if (!view.el.composerError.hidden) view.composerError(null);
  });

  /** An approval card's Edit: its arguments as JSON, sent if they are an object. */
  function editCall(btn) {
    const text = btn.closest("[data-testid='approval']")?.querySelector("[data-testid='edit-args']")?.value ?? "";
    let args = null;
    try {
      args = JSON.parse(text);
    } catch {
      args = null;
    }
    if (args && typeof args === "object" && !Array.isArray(args)) client.decide(btn.dataset.approvalId, "edit", { args });
    else view.notify("The arguments must be a JSON object.", "error");
  }

  /** A question's form: its fields, sent as the answer (the server checks them). */
  function answerForm(btn) {
    const card = btn.closest("[data-testid='approval']");
    if (card) client.decide(btn.dataset.approvalId, "answer", { answer: readForm(card) });
  }

  // Enter in a form's field sends its answer, as its button does; the form
  // itself never submits (a page load): it has no submit button.
  const sendOnEnter = (e) => {
    const form = e.target instanceof Element ? e.target.closest(".approval-form") : null;
    if (!form || (e.type === "keydown" && (e.key !== "Enter" || e.isComposing || e.target.tagName !== "INPUT"))) return;
    e.preventDefault();
    const btn = form.closest("[data-testid='approval']")?.querySelector("button[data-action='answer-form']");
    if (btn && !btn.disabled) answerForm(btn);
  };
  document.addEventListener("keydown", sendOnEnter);
  document.addEventListener("submit", sendOnEnter);

  // --- transcript, queue and run controls (delegated) ---------------------------------
  document.addEventListener("click", (e) => {
    const btn = e.target instanceof Element ? e.target.closest("button[data-action]") : null;
    if (!btn || btn.disabled) return;
    const action = btn.dataset.action;
    if (action === "approve" || action === "deny") {
      const card = btn.closest("[data-testid='approval']");
      const reason = action === "deny" ? card?.querySelector("[data-testid='deny-reason']")?.value.trim() : "";
      client.decide(btn.dataset.approvalId, action, { reason });
    } else if (action === "approve-all" || action === "deny-all") {
      client.decide(btn.dataset.approvalId, action === "approve-all" ? "approve" : "deny", { all: true });
    } else if (action === "approve-edited") {
      editCall(btn);
    } else if (action === "answer-form") {
      answerForm(btn);
    } else if (action === "respond-instead") {
      const response = btn.closest("[data-testid='approval']")?.querySelector("[data-testid='respond-text']")?.value.trim();
      if (response) client.decide(btn.dataset.approvalId, "respond", { response });
      else view.notify("Write the answer the agent should be told first.", "error");
    } else if (action === "cancel-run") {
      client.cancel(btn.dataset.runId || undefined);
    } else if (action === "dequeue") {
      client.cancel(btn.dataset.runId);
    } else if (action === "discard") {
      client.discard(btn.dataset.clientMessageId);
    } else if (action === "reload-from-zero") {
      client.reloadFromZero();
    } else if (action === "reload-page") {
      window.location.reload();
    } else if (action === "stop-and-send") {
      submit({ interrupt: true });
      composer.focus();
    } else if (action === "edit") {
      const row = btn.closest("[data-testid=user-message]");
      if (row) openEditor(document, row, (text) => client.edit(btn.dataset.runId, text));
    } else if (action === "regenerate") {
      // Once: the new answer replaces this button when it starts.
      btn.disabled = true;
      client.regenerate(btn.dataset.runId);
      view.stick = true;
    } else if (action === "branch") {
      client.switchTo(btn.dataset.runId);
    }
  });

  // --- persistence at the edges of the page's life ---------------------------------------
  window.addEventListener("pagehide", () => client.persistNow());
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "hidden") client.persistNow();
    client.outbox.setVisible(document.visibilityState === "visible");
  });
  client.outbox.visible = document.visibilityState === "visible";
  revealGate(document, location.hash);

  attachRename(document, sessionId, (message, level) => view.notify(message, level));
  client.start();
  return { client, view, detach: () => detachSignals() };
}

/**
 * A notice's link opens the page at `#gate-<approval id>`: once its card is
 * shown, it is scrolled to and focused (a card that never comes: nothing).
 */
function revealGate(doc, hash) {
  const id = /^#gate-([\w-]{1,40})$/.exec(hash)?.[1];
  const list = doc.querySelector("[data-testid='transcript']");
  if (!id || !list) return;
  const find = () => list.querySelector(`[data-testid='approval'][data-approval-id='${id}']`);
  const show = (card) => {
    card.classList.add("approval-revealed");
    card.setAttribute("tabindex", "-1");
    card.scrollIntoView({ block: "center" });
    card.focus({ preventScroll: true });
  };
  if (find()) return show(find());
  const watch = new MutationObserver(() => {
    const card = find();
    if (!card) return;
    watch.disconnect();
    show(card);
  });
  watch.observe(list, { childList: true, subtree: true });
  // A card that never comes (another branch, or gone): stop looking for it.
  setTimeout(() => watch.disconnect(), 30_000);
}

if (typeof document !== "undefined" && document.body && document.body.dataset.page === "session") {
  startSessionPage();
}
