"""The AI SDK's example page (tests/clients/ai_sdk_page.mjs: the ``ai``
package's own chat client, bundled with esbuild, as docs/integrations.md
shows it) in Chromium against a real daphne: send, approve, refresh
mid-answer, resume. What it shows equals what the native UI shows of the
same session."""

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
    """The page's script, bundled from the pinned ai package."""
    return bundle("ai_sdk_page.mjs", tmp_path_factory.mktemp("bundle"))


def open_page(ctx, server, script: str, chat_id: str):
    return open_example(ctx, server, script, chat_id=chat_id)


def test_the_ai_sdk_page_sends_approves_and_resumes_after_a_refresh(server, ctx, script):
    """The page's approval card decides the gate (the tool runs once); a
    refresh mid-answer loads the finished turns and resumes the running one
    from the log; the page then shows what the native UI shows."""
    chat_id = "pageChat1"
    page = open_page(ctx, server, script, chat_id)
    send(page, "/write notes.txt from the page")
    tool = page.get_by_test_id("tool")
    expect(tool).to_have_attribute("data-state", "approval-requested", timeout=TIMEOUT)
    page.get_by_test_id("approve").click()
    expect(tool).to_have_attribute("data-state", "output-available", timeout=TIMEOUT)
    ready(page)
    assert ApprovalRequest.objects.get(session__external_id=chat_id).status == "approved"
    assert Event.objects.filter(session__external_id=chat_id, kind="tool.result").count() == 1

    refreshed_mid_answer(page)
    # The chat id is the page's; the session has an id of its own.
    session_id = AgentSession.objects.get(external_id=chat_id).id
    items = same_as_native(ctx, server, page, session_id, runs=2)
    assert [i["status"] for i in items if i["kind"] == "approval"] == ["approved"]
    assert page.get_by_test_id("tool").get_attribute("data-tool") == "write_file"
