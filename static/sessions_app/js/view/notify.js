/**
 * Telling a person that the agent waits: a gate that opens live while this
 * tab is hidden shows a browser notification (once the person allowed
 * them), tagged with the gate so a second tab's does not pile up; clicking
 * it brings the tab back. The Notify button asks for the permission, once;
 * it is hidden where the browser has no notifications or the person decided.
 *
 * @module notify
 */

/**
 * @param {Window} win
 * @returns {(item: object) => void} what the view calls for a gate opened live
 */
export function gateNotifier(win) {
  return (item) => {
    const Notice = win.Notification;
    if (Notice?.permission !== "granted" || win.document.visibilityState !== "hidden") return;
    const notice = new Notice(`Approval needed: ${item.tool}`, {
      body: item.note || "The agent waits for your decision.",
      tag: item.approvalId,
    });
    notice.onclick = () => {
      win.focus();
      notice.close();
    };
  };
}

/**
 * Offer the notifications: `button` shows while the browser could ask.
 * @param {Window} win
 * @param {HTMLButtonElement|null} button
 */
export function offerNotifications(win, button) {
  const Notice = win.Notification;
  if (!button) return;
  const update = () => {
    button.hidden = Notice?.permission !== "default";
  };
  update();
  button.addEventListener("click", async () => {
    await Notice?.requestPermission();
    update();
  });
}
