"""Conversation control scenarios (regenerate, edit, switch) that run in both
profiles: tab A on ``server_a``, tab B on ``server_b`` (the same daphne in
the embedded profile; two daphnes over Redis in the production one)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from django.contrib.auth import get_user_model
from playwright.sync_api import BrowserContext, Page, expect

from sessions_app.models import ApprovalRequest
from sessions_app.runtime.tools import workspace_for
from tests.browser.helpers import (
    TIMEOUT,
    assert_shows_log,
    expect_live,
    frames_sent,
    head,
    new_session,
    park,
    runs,
    send,
    settle,
    wait_cursor,
    wait_cursor_at_least,
)
from tests.browser.scenarios import _restart, tab
from tests.harness import api_key
from tests.support.rig import Hold

USERS = "[data-testid=user-message]:visible"
ANSWERS = "[data-testid=assistant-message]:visible"


def shown_users(page: Page) -> list[str]:
    """The user messages the tab shows (the active path), as written."""
    return page.locator(f"{USERS} > .msg-body").all_text_contents()


def expect_nav(page: Page, where: str, index: int, count: int) -> None:
    nav = page.locator(f"{where} [data-testid=branch-nav]")
    expect(nav).to_have_count(1, timeout=TIMEOUT)
    expect(nav).to_have_attribute("data-index", str(index))
    expect(nav).to_have_attribute("data-count", str(count))


def regenerate(page: Page) -> None:
    page.locator(ANSWERS).last.get_by_test_id("regenerate").click()


def regenerate_watched(context: BrowserContext, server_a, server_b) -> None:
    """Tab A regenerates the last answer while tab B watches: both show the
    new answer as "2 / 2", one answer for the one message, exactly the log's
    active path; a refresh of B keeps it; B switches back to the first
    answer and A follows. A sent two inputs, once each."""
    a, _ = tab(context, server_a)
    session_id = new_session(a, server_a)
    b, _ = tab(context, server_b, session_id)
    send(a, "hello")
    settle([a, b], session_id)
    regenerate(a)
    settle([a, b], session_id, runs=2)
    first, again = runs(session_id)
    assert again.answers_id == first.id and again.message_seq == first.message_seq
    for page in (a, b):
        expect_nav(page, ANSWERS, 2, 2)
        expect(page.locator(ANSWERS)).to_have_count(1)
        assert shown_users(page) == ["hello"]
        assert_shows_log(page, session_id)
    b.reload()
    expect_live(b)
    wait_cursor(b, head(session_id))
    expect_nav(b, ANSWERS, 2, 2)
    assert_shows_log(b, session_id)
    b.locator(ANSWERS).get_by_test_id("branch-prev").click()
    for page in (a, b):
        expect_nav(page, ANSWERS, 1, 2)
        wait_cursor(page, head(session_id))
        assert_shows_log(page, session_id)
    expect(a.locator(ANSWERS).get_by_test_id("regenerate")).to_have_count(1)
    assert frames_sent(a)["send"] == 2


def edit_then_switch_back(context: BrowserContext, server) -> None:
    """Editing the first message of two turns shows the new version alone
    ("2 / 2"); Escape leaves an editor with nothing sent; switching back
    shows the original and the turn that followed it."""
    a, _ = tab(context, server)
    session_id = new_session(a, server)
    send(a, "one")
    settle(a, session_id)
    send(a, "two")
    settle(a, session_id, runs=2)
    first = a.locator(USERS).first
    first.get_by_test_id("edit-message").click()
    box = first.get_by_test_id("edit-input")
    expect(box).to_have_value("one")
    box.press("Escape")
    expect(a.get_by_test_id("edit-input")).to_have_count(0)
    assert shown_users(a) == ["one", "two"]
    first.get_by_test_id("edit-message").click()
    box.fill("uno")
    box.press("Shift+Enter")
    box.press("Backspace")
    box.press("Enter")
    settle(a, session_id, runs=3)
    expect(a.locator(USERS)).to_have_count(1)
    assert shown_users(a) == ["uno"]
    expect_nav(a, USERS, 2, 2)
    assert_shows_log(a, session_id)
    a.locator(USERS).get_by_test_id("branch-prev").click()
    expect(a.locator(USERS)).to_have_count(2)
    assert shown_users(a) == ["one", "two"]
    expect_nav(a, USERS, 1, 2)
    wait_cursor(a, head(session_id))
    assert_shows_log(a, session_id)
    assert frames_sent(a)["send"] == 3


def refresh_mid_regenerate(context: BrowserContext, server) -> None:
    """The regenerate's frame is written and its socket drops at once (the
    send ledger sends it again, by its id); the page is then refreshed while
    the new answer streams. The new answer appears exactly once: two runs,
    one answer shown, "2 / 2", exactly the log."""
    a, _ = tab(context, server)
    session_id = new_session(a, server)
    hold = Hold(pace=30)
    send(a, hold.text)
    hold.release()
    settle(a, session_id)
    hold.rearm()  # the regenerate sends the same text: held until the refresh is done
    before = head(session_id)
    a.evaluate("() => window.__test.failpoint('after-send')")
    regenerate(a)
    wait_cursor_at_least(a, before + 5)
    a.reload()
    expect_live(a)
    hold.release()
    settle(a, session_id, runs=2)
    assert len(runs(session_id)) == 2
    expect(a.locator(ANSWERS)).to_have_count(1)
    expect_nav(a, ANSWERS, 2, 2)
    assert_shows_log(a, session_id)


def _rest_decide(server, user, approval_id: str) -> tuple[int, dict]:
    key = api_key(user)
    req = urllib.request.Request(
        f"{server.http}/api/approvals/{approval_id}/decide/",
        data=json.dumps({"decision": "approve"}).encode(),
        headers={"Authorization": f"Token {key}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def gate_on_edited_branch(context: BrowserContext, server_a, server_b) -> None:
    """Tab A edits a message whose run waits at a gate. The gate closes as
    cancelled in both tabs; an approval of it from tab B and from REST is
    refused (approval_cancelled) and the tool never runs. Switching back
    shows the card cancelled, without its buttons."""
    a, _ = tab(context, server_a)
    session_id = new_session(a, server_a)
    b, _ = tab(context, server_b, session_id)
    send(a, "/write gated.txt never written")
    approval_id = park([a, b], session_id)
    first = a.locator(USERS).first
    first.get_by_test_id("edit-message").click()
    first.get_by_test_id("edit-input").fill("hello instead")
    first.get_by_test_id("edit-input").press("Enter")
    settle([a, b], session_id, runs=2)
    for page in (a, b):
        assert shown_users(page) == ["hello instead"]
        expect(page.locator("[data-testid=approval]:visible")).to_have_count(0)
        assert_shows_log(page, session_id)
    b.evaluate("id => window.__test.client.decide(id, 'approve')", approval_id)
    expect(b.get_by_test_id("notice")).to_contain_text("This approval was cancelled")
    code, body = _rest_decide(server_a, get_user_model().objects.get(username="alice"), approval_id)
    assert (code, body["code"]) == (409, "approval_cancelled")
    approval = ApprovalRequest.objects.get(id=approval_id)
    assert approval.status == "cancelled" and approval.executed_at is not None
    assert not (workspace_for(session_id) / "gated.txt").exists()
    b.locator(USERS).get_by_test_id("branch-prev").click()
    for page in (a, b):
        card = page.locator("[data-testid=approval]:visible")
        expect(card).to_have_attribute("data-status", "cancelled")
        expect(card.get_by_test_id("approve")).to_have_count(0)
        expect(card.get_by_test_id("deny")).to_have_count(0)
        wait_cursor(page, head(session_id))
        assert_shows_log(page, session_id)


def restart_during_regenerate(context: BrowserContext, server_a, server_b) -> None:
    """Every daphne is killed -9 and started again while a regenerated answer
    streams: both tabs resume, the regenerate ran once, and both show the
    active path of the log with its "2 / 2"."""
    a, _ = tab(context, server_a)
    session_id = new_session(a, server_a)
    b, _ = tab(context, server_b, session_id)
    hold = Hold(pace=30)
    send(a, hold.text)
    hold.release()
    settle([a, b], session_id)
    hold.rearm()  # the regenerate sends the same text: held until the restart is done
    before = head(session_id)
    regenerate(a)
    wait_cursor_at_least(b, before + 3)
    _restart([server_a, server_b])
    for page in (a, b):
        expect_live(page, timeout=30_000)
    hold.release()
    settle([a, b], session_id, runs=2)
    assert len(runs(session_id)) == 2
    for page in (a, b):
        expect_nav(page, ANSWERS, 2, 2)
        assert_shows_log(page, session_id)
