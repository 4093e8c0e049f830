"""Smoke: log in, create a session, send, see the streamed reply and 'live'."""

from __future__ import annotations

from playwright.sync_api import expect

from sessions_app.models import Run
from tests.browser.helpers import assistant_texts, new_session, send, settle


def test_login_page_then_chat(server, browser, user):
    """A person logs in with the form, starts a session and chats with the demo agent."""
    context = browser.new_context()
    page = context.new_page()
    page.goto(server.http + "/")
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill("alice-pass-1")
    page.get_by_role("button", name="Sign in").click()
    session_id = new_session(page, server)
    assert f"/s/{session_id}/" in page.url
    send(page, "/stream 5 10")
    expect(page.get_by_test_id("assistant-message")).to_have_text(
        "tok0 tok1 tok2 tok3 tok4 ", timeout=20_000
    )
    settle(page, session_id)
    run = Run.objects.get(session_id=session_id)
    assert run.status == "finished" and run.stop_reason == "end_turn"
    assert assistant_texts(page) == ["tok0 tok1 tok2 tok3 tok4 "]
    expect(page.get_by_test_id("connection-state")).to_have_attribute("data-state", "live")
    user_msg = page.get_by_test_id("user-message")
    expect(user_msg).to_have_count(1)
    assert user_msg.get_attribute("data-client-message-id") == run.client_message_id
    context.close()


def test_refresh_restores_and_resumes(server, ctx):
    """After a refresh the same session shows the same transcript, nothing twice."""
    page = ctx.new_page()
    session_id = new_session(page, server)
    send(page, "hello there")
    settle(page, session_id)
    before = page.get_by_test_id("transcript").inner_text()
    page.reload()
    expect(page.get_by_test_id("connection-state")).to_have_attribute("data-state", "live")
    settle(page, session_id)
    assert page.get_by_test_id("transcript").inner_text() == before
    expect(page.get_by_test_id("user-message")).to_have_count(1)


def test_a_page_whose_files_fail_to_load_reloads_itself(server, ctx):
    """The server dies right after sending a page: none of its files load (not
    even a script that could retry), and it would stay dead at "Connecting…".
    The inline boot script reloads it, and the tab goes live."""
    from tests.browser.helpers import expect_live

    first = ctx.new_page()
    session_id = new_session(first, server)
    page = ctx.new_page()
    documents = []
    page.on("framenavigated", lambda frame: documents.append(frame.url))

    def dead_on_first_load(route):
        # Every file of the first document fails, as with a server gone.
        if len(documents) <= 1:
            route.abort("connectionreset")
        else:
            route.continue_()

    page.route("**/static/**", dead_on_first_load)
    page.goto(f"{server.http}/s/{session_id}/")
    expect_live(page)
    assert len(documents) >= 2, "the page was loaded again"
    assert page.evaluate("() => document.documentElement.dataset.app") == "started"
