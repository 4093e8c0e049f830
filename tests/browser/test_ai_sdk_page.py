"""The AI SDK's example page (tests/clients/ai_sdk_page.mjs: the ``ai``
package's own chat client, bundled with esbuild, as docs/integrations.md
shows it) in Chromium against a real daphne: send, approve, refresh
mid-answer, resume. What it shows equals what the native UI shows of the
same session."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from sessions_app.models import AgentSession, ApprovalRequest, Event, Run
from tests.browser.example_pages import bundle, open_example, send, shown
from tests.browser.helpers import TIMEOUT, settle, transcript


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
    expect(page.locator("#app")).to_have_attribute("data-status", "ready", timeout=TIMEOUT)
    assert ApprovalRequest.objects.get(session__external_id=chat_id).status == "approved"
    assert Event.objects.filter(session__external_id=chat_id, kind="tool.result").count() == 1

    send(page, "/stream 40 60")
    expect(page.get_by_test_id("assistant-message").last).to_contain_text("tok3 ", timeout=TIMEOUT)
    run = Run.objects.order_by("-created_at").first()
    assert run.status == "running"
    page.reload()
    expect(page.locator("#app")).to_have_attribute("data-loaded", "true", timeout=TIMEOUT)
    whole = "".join(f"tok{i} " for i in range(40))
    expect(page.get_by_test_id("assistant-message").last).to_have_text(whole, timeout=TIMEOUT)
    expect(page.locator("#app")).to_have_attribute("data-status", "ready", timeout=TIMEOUT)
    assert page.locator("#app").get_attribute("data-error") is None

    page_shows = shown(page)
    # The chat id is the page's; the session has an id of its own.
    session_id = AgentSession.objects.get(external_id=chat_id).id
    native = ctx.new_page()
    native.goto(f"{server.http}/s/{session_id}/")
    settle(native, session_id, runs=2)
    items = transcript(native)["items"]
    users = [i["text"] for i in items if i["kind"] == "user-message"]
    answers = [i["text"] for i in items if i["kind"] == "assistant-message"]
    assert [t for role, t in page_shows if role == "user-message"] == users
    page_answers = [t for role, t in page_shows if role == "assistant-message"]
    assert "|".join(page_answers) == "|".join(answers)
    assert [i["status"] for i in items if i["kind"] == "approval"] == ["approved"]
    assert page.get_by_test_id("tool").get_attribute("data-tool") == "write_file"
