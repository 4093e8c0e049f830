"""A question's form in Chromium (the scripted ``/ask``): every tab shows the
form; a bad value typed is refused by the server, which says which field and
why, and the card still waits; the corrected answer is sent once, every tab
shows what was answered, and the agent's reply carries exactly those fields."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import expect

from sessions_app.models import ApprovalRequest, Event
from tests.browser.helpers import TIMEOUT, expect_live, new_session, send, settle
from tests.browser.scenarios import tab

pytestmark = pytest.mark.browser


def test_a_form_is_typed_refused_corrected_and_answered_once(server, ctx):
    """Tab A types a name, a bad email and an age over the bound (the form
    checks nothing itself): the server's refusal names both fields and the
    card still waits, with what was typed kept; tab B, refreshed meanwhile,
    shows the same form. Corrected and sent with Enter, both tabs show the
    answer, and the agent is told exactly those fields."""
    a, _ = tab(ctx, server)
    session_id = new_session(a, server)
    b, _ = tab(ctx, server, session_id)
    send(a, "/ask")
    card = a.locator("[data-testid=approval][data-kind=question]")
    expect(card).to_have_attribute("data-status", "pending", timeout=TIMEOUT)
    expect(card.get_by_test_id("approve")).to_be_hidden()
    expect(card.get_by_test_id("deny")).to_have_text("Decline")
    card.get_by_test_id("form-name").fill("Ada")
    card.get_by_test_id("form-email").fill("ada-at-example")
    card.get_by_test_id("form-age").fill("200")
    card.get_by_test_id("form-plan").select_option("team")
    card.get_by_test_id("answer-form").click()
    notice = a.get_by_test_id("notice")
    expect(notice).to_contain_text("age: must be at most 150", timeout=TIMEOUT)
    expect(notice).to_contain_text("email: must be an email address")
    expect(card).to_have_attribute("data-status", "pending")
    expect(card.get_by_test_id("form-name")).to_have_value("Ada")
    b.reload()
    expect_live(b)
    other = b.locator("[data-testid=approval][data-kind=question]")
    expect(other.get_by_test_id("form-plan")).to_have_value("free")  # its default
    card.get_by_test_id("form-email").fill("ada@example.org")
    card.get_by_test_id("form-age").fill("36")
    card.get_by_test_id("form-news").check()
    card.get_by_test_id("form-age").press("Enter")
    settle([a, b], session_id)
    answer = {"age": 36, "email": "ada@example.org", "name": "Ada", "news": True, "plan": "team"}
    for page in (a, b):
        shown = page.locator("[data-testid=approval][data-kind=question]")
        expect(shown).to_have_attribute("data-status", "answered")
        expect(shown.get_by_test_id("approval-decision")).to_have_text("Answered by alice")
        expect(shown.get_by_test_id("form-answer")).to_contain_text("ada@example.org")
        expect(shown.get_by_test_id("question-form")).to_have_count(0)
        said = page.get_by_test_id("assistant-message").last
        expect(said).to_contain_text(f"answered: {json.dumps(answer, sort_keys=True)}")
    [row] = ApprovalRequest.objects.filter(session_id=session_id, kind="question")
    assert (row.status, row.answer, row.decided_via) == ("answered", answer, "tab")
    decided = Event.objects.filter(session_id=session_id, kind="approval.decided")
    assert decided.count() == 1
