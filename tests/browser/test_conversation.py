"""Conversation control in Chromium: stop and send, the page's title,
regenerate, edit and resend, branches and the gates they leave behind.

The multi-tab scenarios run on the production profile across two servers
too (``test_multitab_production.py``)."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.browser import branching, scenarios
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


def test_regenerate_in_one_tab_while_another_watches_then_refresh(server, ctx):
    """Tab A regenerates; tab B follows, keeps it after a refresh, and switches
    back to the first answer, which A follows."""
    branching.regenerate_watched(ctx, server, server)


def test_edit_a_message_a_later_answer_followed_then_switch_back(server, ctx):
    """An edit of the first of two turns branches; switching back shows both."""
    branching.edit_then_switch_back(ctx, server)


def test_refresh_in_the_middle_of_a_regenerate_shows_the_new_answer_once(server, ctx):
    """A dropped socket right after the regenerate and a refresh mid-answer:
    the new answer exists once and is shown once."""
    branching.refresh_mid_regenerate(ctx, server)


def test_an_approval_of_a_gate_on_an_edited_branch_is_refused(server, ctx):
    """The gate of an edited message's run closes as cancelled; approving it
    from another tab or from REST is refused and its tool never runs."""
    branching.gate_on_edited_branch(ctx, server, server)


def test_a_server_restart_during_a_regenerate(daphnes, ctx):
    """daphne is killed -9 and restarted while a regenerated answer streams."""
    server = daphnes()
    branching.restart_during_regenerate(ctx, server, server)
