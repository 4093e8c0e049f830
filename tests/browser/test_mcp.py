"""An MCP server's tools in the native UI, in Chromium (docs/integrations.md,
"MCP servers as tools"): the server (tests/mcp/notes_server.py, written with
the official ``mcp`` package, over stdio) is listed into the registry, its
gated tool asks on a card, runs once when approved and its result shows; one
that crashes mid-call shows a failed result and the run goes on; an
auto-approved one runs with no card. Embedded profile: the server process
runs the agents, and holds the MCP connection."""

from __future__ import annotations

import json

import pytest
from django.conf import settings
from playwright.sync_api import expect

from sessions_app.models import ApprovalRequest, Event
from tests.browser.helpers import (
    TIMEOUT,
    assistant_texts,
    new_session,
    open_session,
    park,
    send,
    settle,
)
from tests.mcp import servers


@pytest.fixture
def mcp_site(daphnes, tmp_path):
    if settings.AGENT_RUNNER == "worker":
        pytest.skip("the shared run workers of the production profile have no MCP servers set")
    notes = tmp_path / "notes.txt"
    notes.touch()
    return daphnes(AGENT_MCP_SERVERS=json.dumps(servers(notes))), notes


def test_an_mcp_tool_through_a_whole_run_in_the_browser(mcp_site, ctx, login):
    """Listed, gated, approved, result shown; a crash mid-call is a failed
    result and the run ends normally; an auto-approved call shows no card."""
    site, notes = mcp_site
    login(ctx, site)
    page = ctx.new_page()
    session_id = new_session(page, site)

    send(page, '/tool notes__note {"text": "from the browser"}')
    park([page], session_id)
    card = page.get_by_test_id("approval")
    expect(card).to_contain_text("notes__note")
    card.get_by_test_id("approve").click()
    result = page.get_by_test_id("tool-result")
    expect(result).to_have_attribute("data-ok", "true", timeout=TIMEOUT)
    expect(result).to_contain_text("noted: from the browser")
    settle(page, session_id, runs=1)
    assert notes.read_text() == "from the browser\n"
    assert assistant_texts(page)[-1] == "notes__note: noted: from the browser"

    send(page, "/tool notes__crash {}")
    second = page.get_by_test_id("approval").last
    expect(second).to_have_attribute("data-status", "pending", timeout=TIMEOUT)
    expect(second).to_contain_text("notes__crash")
    second.get_by_test_id("approve").click()
    expect(page.get_by_test_id("tool-result").last).to_have_attribute(
        "data-ok", "false", timeout=TIMEOUT
    )
    expect(page.get_by_test_id("tool-result").last).to_contain_text("MCP server 'notes' failed")
    settle(page, session_id, runs=2)

    send(page, '/tool notes__add {"a": 40, "b": 2}')
    settle(page, session_id, runs=3)
    expect(page.get_by_test_id("tool-result").last).to_contain_text("42")
    expect(page.get_by_test_id("approval")).to_have_count(2)  # the add had none
    assert (
        ApprovalRequest.objects.filter(session_id=session_id, tool="notes__add").get().decided_by
        == "auto-approve"
    )
    assert Event.objects.filter(session_id=session_id, kind="tool.result").count() == 3


def test_a_question_the_server_asks_is_a_card_decided_once_from_another_tab(mcp_site, ctx, login):
    """forget() asks while it runs (an MCP elicitation): both tabs show a
    second card with the server's question and its form, started at what
    approving answers (the required yes ticked); one tab sends it, the
    other's buttons go, and both show the tool's result."""
    site, notes = mcp_site
    login(ctx, site)
    page = ctx.new_page()
    session_id = new_session(page, site)
    send(page, '/tool notes__forget {"name": "old"}')
    park([page], session_id)
    page.get_by_test_id("approval").get_by_test_id("approve").click()
    other = open_session(ctx.new_page(), site, session_id)
    for tab in (page, other):
        asked = tab.get_by_test_id("approval").last
        expect(asked).to_have_attribute("data-status", "pending", timeout=TIMEOUT)
        expect(asked.get_by_test_id("approval-note")).to_have_text("Forget the note 'old'?")
        expect(asked.get_by_test_id("form-sure")).to_be_checked()
    other.get_by_test_id("approval").last.get_by_test_id("answer-form").click()
    for tab in (page, other):
        asked = tab.get_by_test_id("approval").last
        expect(asked).to_have_attribute("data-status", "answered", timeout=TIMEOUT)
        expect(asked.get_by_test_id("answer-form")).to_have_count(0)
        expect(asked.get_by_test_id("form-answer")).to_contain_text("Yes")
        expect(tab.get_by_test_id("tool-result").last).to_contain_text("forgot old")
    settle([page, other], session_id, runs=1)
    assert notes.read_text() == "forgot old\n"
    assert Event.objects.filter(session_id=session_id, kind="approval.decided").count() == 2
