"""Browser fixtures: Debian's Chromium through Playwright, logged-in contexts.

Browser tests run in their own pytest invocation (after the async tests):
Playwright keeps an event loop running in the test process. They use only the
DOM contract, the protocol and the client's ``window.__test`` hooks.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

import pytest

from tests.conftest import ARTIFACTS

CHROMIUM = "/usr/bin/chromium"


def pytest_collection_modifyitems(config, items):
    for item in items:
        if Path(str(item.fspath)).parent.name == "browser":
            item.add_marker(pytest.mark.browser)


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    return {**browser_type_launch_args, "executable_path": CHROMIUM}


@pytest.fixture
def login(cookie, server):
    """Log a browser context in as the test user (the session cookie)."""
    name, value = cookie.split("=", 1)

    def apply(context, srv=None):
        srv = srv or server
        context.add_cookies([{"name": name, "value": value, "url": srv.http, "httpOnly": True}])
        return context

    return apply


@pytest.fixture
def ctx(browser, login, request):
    """A logged-in browser context; its trace and screenshots are kept on failure."""
    context = browser.new_context(viewport={"width": 1100, "height": 800})
    login(context)
    context.tracing.start(screenshots=True, snapshots=True)
    yield context
    failed = getattr(request.node, "rep_call", None) and request.node.rep_call.failed
    if failed:
        ARTIFACTS.mkdir(exist_ok=True)
        name = re.sub(r"[^\w.-]", "_", request.node.name)
        for i, page in enumerate(context.pages):
            with contextlib.suppress(Exception):  # best effort on a broken page
                page.screenshot(path=str(ARTIFACTS / f"{name}-{i}.png"), full_page=True)
        context.tracing.stop(path=str(ARTIFACTS / f"{name}-trace.zip"))
    else:
        context.tracing.stop()
    context.close()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report
