"""The app in another project, in Chromium (docs/embedding.md): the wheel
installed into a host project written as the document shows it, with a tool
of the project's own. A person signs in on the project's own page, gets an
answer, approves the project's tool at its gate, and reads the API docs
page (Swagger UI from the site's own static files)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.helpers import TIMEOUT, expect_live, send
from tests.test_embedding import host_project, installed_wheel  # noqa: F401 (fixtures)

pytestmark = pytest.mark.browser


@pytest.fixture
def site(host_project):  # noqa: F811
    _base, http, _cookie = host_project
    return http


@pytest.fixture
def ctx(browser):
    context = browser.new_context(viewport={"width": 1100, "height": 800})
    yield context
    context.close()


def test_a_person_uses_the_app_inside_another_project(site, ctx):
    """Sign in (the project's page), a new session under /agents/, an answer,
    the project's own tool approved and run once, then the API docs page."""
    page = ctx.new_page()
    page.goto(f"{site}/accounts/login/?next=/agents/")
    expect(page.get_by_text("the shop's own sign-in page")).to_be_visible()
    page.locator("input[name=username]").fill("host-user")
    page.locator("input[name=password]").fill("host-pass-1")
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{site}/agents/")
    page.get_by_test_id("new-session").click()
    expect_live(page)
    send(page, "/echo hello from the host")
    answer = page.get_by_test_id("assistant-message").last
    expect(answer).to_have_text("hello from the host", timeout=TIMEOUT)

    send(page, '/tool shout {"text": "hello"}')
    card = page.get_by_test_id("approval")
    expect(card).to_have_attribute("data-status", "pending", timeout=TIMEOUT)
    expect(card).to_contain_text("shout")
    card.get_by_test_id("approve").click()
    result = page.get_by_test_id("tool-result")
    expect(result).to_have_attribute("data-ok", "true", timeout=TIMEOUT)
    expect(result).to_contain_text("HELLO")
    expect(card).to_have_attribute("data-status", "approved")

    page.goto(f"{site}/agents/api/docs/")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text(
        "Agent sessions API", timeout=TIMEOUT
    )
    expect(page.locator(".swagger-ui")).to_contain_text("/agents/api/sessions/{session_id}/stream/")
