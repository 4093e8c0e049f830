"""The session list in Chromium: updated by push in a second tab, no reload."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.browser.helpers import TIMEOUT, new_session, send, settle


def test_the_list_updates_without_a_reload(server, ctx):
    """Tab B shows the list; what tab A does appears there live."""
    live_list(ctx, server, server)


def live_list(ctx, server_a, server_b) -> None:
    """Tab A on ``server_a`` works in a session; tab B, on ``server_b``'s list
    page, shows the new session, its title from the first message, the approval
    waiting, and the session idle again once the run ended: all without reload."""
    b = ctx.new_page()
    b.goto(server_b.http + "/")
    expect(b.locator("body")).to_have_attribute("data-list-live", "true", timeout=TIMEOUT)
    b.evaluate("() => { window.__sameDocument = true; }")
    a = ctx.new_page()
    session_id = new_session(a, server_a)
    card = b.locator(f'[data-testid=session-link][data-session-id="{session_id}"]')
    expect(card).to_be_visible(timeout=TIMEOUT)
    send(a, "/write notes.txt hello")
    expect(card.locator(".session-card-title")).to_have_text("/write notes.txt hello")
    expect(card).to_have_attribute("data-status", "awaiting_approval", timeout=TIMEOUT)
    expect(card.get_by_test_id("pending-approvals")).to_have_attribute("data-count", "1")
    expect(card.get_by_test_id("running-badge")).to_have_count(0)  # waiting, not running
    a.get_by_test_id("approve").click()
    settle(a, session_id)
    expect(card).to_have_attribute("data-status", "idle", timeout=TIMEOUT)
    expect(card.get_by_test_id("pending-approvals")).to_have_count(0)
    expect(card.get_by_test_id("running-badge")).to_have_count(0)
    assert b.evaluate("() => window.__sameDocument === true"), "the list page was reloaded"


def test_renaming_a_session_reaches_the_list_and_survives_a_refresh(server, ctx):
    """Rename in the session page's header: the header, an open list and a refresh
    all show the new title."""
    b = ctx.new_page()
    b.goto(server.http + "/")
    expect(b.locator("body")).to_have_attribute("data-list-live", "true", timeout=TIMEOUT)
    a = ctx.new_page()
    session_id = new_session(a, server)
    a.get_by_test_id("rename-session").click()
    field = a.get_by_test_id("rename-input")
    field.fill("Quarterly plan")
    field.press("Enter")
    expect(a.get_by_test_id("session-title")).to_have_text("Quarterly plan")
    card = b.locator(f'[data-testid=session-link][data-session-id="{session_id}"]')
    expect(card.locator(".session-card-title")).to_have_text("Quarterly plan", timeout=TIMEOUT)
    a.reload()
    expect(a.get_by_test_id("connection-state")).to_have_attribute("data-state", "live")
    expect(a.get_by_test_id("session-title")).to_have_text("Quarterly plan")
    field_gone = a.get_by_test_id("rename-input")
    expect(field_gone).to_have_count(0)
