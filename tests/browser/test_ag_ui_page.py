"""AG-UI's example page (tests/clients/ag_ui_page.mjs: @ag-ui/client's own
HttpAgent, bundled with esbuild, as docs/integrations.md shows it) in
Chromium against a real daphne: send, answer the gate's interrupt, refresh
mid-answer and join the run going. What it shows equals what the native UI
shows of the same session."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from sessions_app.models import AgentSession, ApprovalRequest, Event
from tests.browser.example_pages import (
    bundle,
    open_example,
    ready,
    refreshed_mid_answer,
    same_as_native,
    send,
)
from tests.browser.helpers import TIMEOUT


@pytest.fixture(scope="module")
def script(tmp_path_factory) -> str:
    """The page's script, bundled from the pinned @ag-ui/client."""
    return bundle("ag_ui_page.mjs", tmp_path_factory.mktemp("bundle"))


def test_the_ag_ui_page_answers_an_interrupt_and_joins_after_a_refresh(server, ctx, script):
    """The gate ends the run with an interrupt, whose Approve resumes it (the
    tool runs once); a refresh mid-answer joins the thread (its snapshot,
    then the run going, from the log), each character once; the page then
    shows what the native UI shows."""
    thread = "pageThread1"
    page = open_example(ctx, server, script, thread_id=thread)
    ready(page)
    send(page, "/write notes.txt from ag-ui")
    expect(page.get_by_test_id("interrupt")).to_be_visible(timeout=TIMEOUT)
    ready(page)
    page.get_by_test_id("approve").click()
    output = page.get_by_test_id("output")
    expect(output).to_have_text("appended 11 bytes to notes.txt", timeout=TIMEOUT)
    ready(page)
    expect(page.get_by_test_id("interrupt")).to_have_count(0)
    assert ApprovalRequest.objects.get(session__external_id=thread).status == "approved"
    assert Event.objects.filter(session__external_id=thread, kind="tool.result").count() == 1

    refreshed_mid_answer(page)
    session_id = AgentSession.objects.get(external_id=thread).id
    same_as_native(ctx, server, page, session_id, runs=2, textless=True)
    assert page.get_by_test_id("tool").get_attribute("data-tool") == "write_file"
