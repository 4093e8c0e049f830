"""Browser fixtures: Debian's Chromium through Playwright, logged-in contexts.

Browser tests run in their own pytest invocation (after the async tests):
Playwright keeps an event loop running in the test process. They use only the
DOM contract, the protocol and the client's ``window.__test`` hooks.

On failure every page of the test's contexts is kept under ``test-results/``:
a screenshot, the Playwright trace (one per context) and a JSON file with the
client's own state and the recorder's logs (see helpers.RECORDER_JS).
"""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path

import pytest

from tests.browser.helpers import install_recorder
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
    """Log a browser context in as the test user (the session cookie).

    Cookies are per host, not per port: one login covers every test server
    on 127.0.0.1.
    """
    name, value = cookie.split("=", 1)

    def apply(context, srv=None):
        srv = srv or server
        context.add_cookies([{"name": name, "value": value, "url": srv.http, "httpOnly": True}])
        return context

    return apply


@pytest.fixture
def new_context(browser, login, request):
    """Make logged-in, recorded, traced browser contexts; artifacts are kept on failure."""
    made = []

    def make(logged_in: bool = True):
        context = browser.new_context(viewport={"width": 1100, "height": 800})
        if logged_in:
            login(context)
        install_recorder(context)
        context.tracing.start(screenshots=True, snapshots=True)
        made.append(context)
        return context

    yield make
    failed = getattr(request.node, "rep_call", None) and request.node.rep_call.failed
    name = re.sub(r"[^\w.-]", "_", request.node.name)
    for n, context in enumerate(made):
        with contextlib.suppress(Exception):  # a context the test closed itself
            if failed:
                _keep_artifacts(context, f"{name}-ctx{n}")
            else:
                context.tracing.stop()
        with contextlib.suppress(Exception):
            context.close()


def _keep_artifacts(context, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    states = {}
    for i, page in enumerate(context.pages):
        with contextlib.suppress(Exception):  # best effort on a broken page
            page.screenshot(path=str(ARTIFACTS / f"{name}-page{i}.png"), full_page=True)
        with contextlib.suppress(Exception):
            states[f"page{i}"] = page.evaluate(
                "() => ({url: location.href, state: window.__test && window.__test.state(),"
                " rec: window.__rec})"
            )
    (ARTIFACTS / f"{name}-state.json").write_text(json.dumps(states, indent=1, default=str))
    context.tracing.stop(path=str(ARTIFACTS / f"{name}-trace.zip"))


@pytest.fixture
def ctx(new_context):
    """A logged-in browser context; its trace and screenshots are kept on failure."""
    return new_context()


@pytest.fixture(scope="session")
def _second_daphne(_shared_server, django_db_blocker, tmp_path_factory):
    """Production profile: a second daphne on the same PostgreSQL and Redis."""
    from tests.harness import Daphne

    with django_db_blocker.unblock():
        daphne = Daphne(tmp_path_factory.mktemp("server-b")).start()
    yield daphne
    daphne.stop()


@pytest.fixture
def server_b(server, _second_daphne):
    """The second server (tab B's), with the clean database of ``server``."""
    return _second_daphne


@pytest.fixture
def daphnes(server, tmp_path):
    """Start dedicated daphne processes (to kill and restart); all are killed
    at the end. In the embedded profile runs execute inside them; in the
    production profile the shared run workers execute them."""
    from tests.harness import Daphne

    started = []

    def start(**env):
        daphne = Daphne(tmp_path, **env).start()
        started.append(daphne)
        return daphne

    yield start
    for daphne in started:
        daphne.kill()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report
