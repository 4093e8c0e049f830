"""A person told that the agent waits (static/sessions_app/js/view/notify.js):
a gate that opens live while a tab is hidden shows a browser notification
in that tab, once the person allowed them; a visible tab, or a gate only
replayed, shows none. The browser's Notification and the tab's visibility
are the page's own (an init script records what the page asks of them)."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from tests.browser.helpers import (
    TIMEOUT,
    expect_live,
    new_session,
    park,
    send,
    session_url,
)

RECORD = """
window.__notified = [];
window.__hidden = sessionStorage.getItem("test-hidden") === "1";
window.__asked = 0;
class RecordedNotification {
  static permission = sessionStorage.getItem("test-permission") || "default";
  static async requestPermission() {
    window.__asked += 1;
    RecordedNotification.permission = "granted";
    return "granted";
  }
  constructor(title, options) {
    window.__notified.push({ title, body: options.body, tag: options.tag });
  }
  close() {}
}
window.Notification = RecordedNotification;
Object.defineProperty(Document.prototype, "visibilityState", {
  configurable: true,
  get() { return window.__hidden ? "hidden" : "visible"; },
});
"""


def _notified(page) -> list[dict]:
    return page.evaluate("() => window.__notified")


def test_a_hidden_tab_is_told_of_a_gate_once_allowed(server, ctx):
    """Tab A allows notifications (its Notify me button, once), then is
    hidden; tab B asks for a write: A shows one notification naming the tool,
    tagged with the gate. B, visible, shows none; A reloaded (the gate
    replayed) shows none either."""
    ctx.add_init_script(RECORD)
    a = ctx.new_page()
    session_id = new_session(a, server)
    button = a.get_by_test_id("notify-me")
    expect(button).to_be_visible()
    button.click()
    expect(button).to_be_hidden()
    assert a.evaluate("() => window.__asked") == 1
    b = ctx.new_page()
    b.goto(session_url(server, session_id))
    expect_live(b)
    b.evaluate("() => window.Notification.requestPermission()")
    a.evaluate("() => { window.__hidden = true; }")
    send(b, "/write told.txt hello")
    approval_id = park([a, b], session_id)
    a.wait_for_function("() => window.__notified.length === 1", timeout=TIMEOUT)
    assert _notified(a) == [
        {
            "title": "Approval needed: write_file",
            "body": "The agent waits for your decision.",
            "tag": approval_id,
        }
    ]
    assert _notified(b) == []
    # Hidden and allowed from its first script: the replay tells nothing.
    a.evaluate("""() => {
        sessionStorage.setItem("test-hidden", "1");
        sessionStorage.setItem("test-permission", "granted");
    }""")
    a.reload()
    expect_live(a)
    park([a], session_id)
    assert a.evaluate("() => document.visibilityState") == "hidden"
    assert _notified(a) == []


def test_a_tab_tells_the_server_when_it_is_hidden_and_shown(server, ctx):
    """The socket's row follows the tab: hidden, then shown (the server's
    notices wait for a person none of whose tabs is visible); a hidden tab
    reloaded says so on its new socket."""
    from sessions_app.models import Connection
    from tests.support.waiting import wait_for

    ctx.add_init_script(RECORD)
    a = ctx.new_page()
    session_id = new_session(a, server)
    open_rows = Connection.objects.filter(session_id=session_id, closed_at__isnull=True)
    wait_for(lambda: open_rows.filter(visible=True).exists())
    hide = "() => { window.__hidden = %s; document.dispatchEvent(new Event('visibilitychange')); }"
    a.evaluate(hide % "true")
    wait_for(lambda: open_rows.filter(visible=False).exists())
    a.evaluate(hide % "false")
    wait_for(lambda: open_rows.filter(visible=True).exists())
    a.evaluate("() => sessionStorage.setItem('test-hidden', '1')")
    a.reload()
    expect_live(a)
    wait_for(lambda: open_rows.count() == 1 and open_rows.filter(visible=False).exists())


def test_a_notices_link_opens_the_page_at_its_card(server, ctx):
    """The page opened at ``#gate-<id>`` (where a notice's link leads)
    shows that card focused and marked, once it is rendered."""
    a = ctx.new_page()
    session_id = new_session(a, server)
    send(a, "/write told.txt hello")
    approval_id = park([a], session_id)
    b = ctx.new_page()
    b.goto(f"{session_url(server, session_id)}#gate-{approval_id}")
    expect_live(b)
    card = b.locator(f"[data-testid=approval][data-approval-id='{approval_id}']")
    expect(card).to_have_class(re.compile(r"\bapproval-revealed\b"), timeout=TIMEOUT)
    expect(card).to_be_focused()
