"""Conversation control in Chromium: stop and send, and the page's title.

The same scenario runs on the production profile across two servers
(``test_multitab_production.py``)."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.browser import scenarios
from tests.browser.helpers import new_session, open_tab, send


def test_stop_and_send_during_a_long_stream(server, ctx):
    """Tab A stops a long answer and sends at once; tab B watches; both show
    exactly the log, and the queued input runs after the new one."""
    scenarios.stop_and_send(ctx, server, server)


def test_the_open_page_follows_the_title_its_first_message_gives(server, ctx):
    """The first message names the session: the open page's header and the
    document title follow by push, in this tab and in another, no reload."""
    a = ctx.new_page()
    session_id = new_session(a, server)
    b = open_tab(ctx, server, session_id)
    for page in (a, b):
        expect(page.get_by_test_id("session-title")).to_have_text("Untitled session")
    send(a, "Plan the trip")
    for page in (a, b):
        expect(page.get_by_test_id("session-title")).to_have_text("Plan the trip")
        expect(page).to_have_title("Plan the trip · Agent sessions")
