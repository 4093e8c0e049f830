"""The deployment recipe (docs/deploy.md), run: nginx with TLS in front of two
daphne processes and the run workers, on PostgreSQL and Redis, with nginx's
configuration exactly deploy/nginx/agent-sessions.conf (its placeholders
filled in; the one change: a short read timeout, so that outliving it takes
seconds). Chromium signs in over https, follows a session through the
proxy, idles past nginx's read timeout, and lives through a SIGTERM restart
of one daphne.

nginx comes from apt, as Chromium does (./scripts/test); without it these
tests are skipped, loudly."""

from __future__ import annotations

import ssl
import time

import pytest
import websockets
from playwright.sync_api import expect

from tests.browser.helpers import Wire, assert_shows_log, settle
from tests.browser.proxy import READ_TIMEOUT, deploy

pytestmark = pytest.mark.postgres


@pytest.fixture
def deployment(daphnes, tmp_path):
    """nginx (TLS) in front of two daphnes, as docs/deploy.md sets them up."""
    yield from deploy(daphnes, tmp_path)


def test_the_recipe_serves_the_app_over_https_through_restarts(deployment, browser, user):
    """Signed in over https (secure cookies), a tab follows a session
    through nginx: a stream arrives; the socket outlives nginx's read timeout
    (the client's pings); a SIGTERM restart of one daphne brings every tab
    back live, on the same transcript as the log."""
    site, (one, _two) = deployment
    context = browser.new_context(ignore_https_errors=True)
    page = context.new_page()
    wire = Wire(page)
    page.goto(site.http + "/")
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill("alice-pass-1")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_test_id("new-session")).to_be_visible()
    cookies = {c["name"]: c for c in context.cookies()}
    assert cookies["sessionid"]["secure"] and cookies["csrftoken"]["secure"]
    # The static files come from collectstatic's output, served by nginx.
    css = page.request.get(site.http + "/static/sessions_app/css/app.css")
    assert css.ok and "text/css" in css.headers["content-type"]
    page.get_by_test_id("new-session").click()
    expect(page.get_by_test_id("connection-state")).to_have_attribute("data-state", "live")
    session_id = page.get_by_test_id("transcript").get_attribute("data-session-id")
    page.get_by_test_id("composer").fill("/stream 5 10")
    page.get_by_test_id("composer").press("Enter")
    settle(page, session_id)
    assert_shows_log(page, session_id)

    # Idle past nginx's read timeout: two pings (each after 10 s of silence)
    # and their pongs later, still the first socket, live.
    deadline = time.monotonic() + 4 * READ_TIMEOUT
    while len(wire.sent(0, "ping")) < 2 or len(wire.received(0, "pong")) < 2:
        assert time.monotonic() < deadline, wire.sent(0, "ping")
        page.wait_for_timeout(200)  # sleep-ok: Playwright delivers frames only while it waits
    assert len(wire.sockets) == 1 and not wire.sockets[0]["closed"], "replaced while idle"
    expect(page.get_by_test_id("connection-state")).to_have_attribute("data-state", "live")

    # A second tab; then one daphne is stopped (SIGTERM: 1012) and started again.
    other = context.new_page()
    other.goto(f"{site.http}/s/{session_id}/")
    expect(other.get_by_test_id("connection-state")).to_have_attribute("data-state", "live")
    one.stop()
    one.start_again()
    for tab in (page, other):
        expect(tab.get_by_test_id("connection-state")).to_have_attribute(
            "data-state", "live", timeout=30_000
        )
    other.get_by_test_id("composer").fill("after the restart")
    other.get_by_test_id("composer").press("Enter")
    settle([page, other], session_id, runs=2)
    for tab in (page, other):
        assert_shows_log(tab, session_id)
    context.close()


def test_the_origin_check_holds_behind_the_proxy(deployment, cookie):
    """Through nginx over TLS, a socket from the site's own https origin is
    let in; one from another origin, or from the site's http origin, is 403."""
    from websockets.sync.client import connect

    site, _ = deployment
    tls = ssl.create_default_context()
    tls.check_hostname = False
    tls.verify_mode = ssl.CERT_NONE
    headers = {"Cookie": cookie}
    with connect(
        site.ws, ssl=tls, origin=site.http, additional_headers=headers, open_timeout=30
    ) as ws:
        ws.send('{"type": "start", "protocol": 1}')
        assert '"start_ok"' in ws.recv(timeout=10)
    for origin in ("https://evil.invalid", f"http://localhost:{site.port}"):
        with (
            pytest.raises(websockets.InvalidStatus) as refused,
            connect(site.ws, ssl=tls, origin=origin, additional_headers=headers, open_timeout=30),
        ):
            pass
        assert refused.value.response.status_code == 403


@pytest.fixture
def throttled_deployment(daphnes, tmp_path):
    """The recipe with a public API schema and an anonymous rate of 3 a minute."""
    yield from deploy(daphnes, tmp_path, AGENT_PUBLIC_API_DOCS="1", AGENT_API_RATE="3/minute")


def test_the_proxy_guards_the_operators_pages_and_the_throttle(throttled_deployment):
    """Through nginx: a spoofed X-Forwarded-For buys no fresh throttle count,
    and two daphnes count one rate (Redis: 3 a minute means 3, not 6); the
    admin, the scrape and the probes answer only the operator's network (a
    client from 127.0.0.2 gets nginx's 403, the site itself still answers
    it); static files carry nosniff and HSTS."""
    import httpx

    site, _ = throttled_deployment
    codes = []
    with httpx.Client(base_url=site.http, verify=False, timeout=30) as c:
        for i in range(6):
            spoofed = {"X-Forwarded-For": f"203.0.113.{i}"}
            codes.append(c.get("/api/schema/", headers=spoofed).status_code)
        static = c.get("/static/sessions_app/css/app.css")
    assert codes == [200, 200, 200, 429, 429, 429], codes
    assert static.headers["x-content-type-options"] == "nosniff"
    assert static.headers["strict-transport-security"].startswith("max-age=")
    outside = httpx.HTTPTransport(local_address="127.0.0.2", verify=False)
    with httpx.Client(base_url=site.http, transport=outside, timeout=30) as c:
        for path in ("/admin/", "/metrics", "/metrics/database", "/readyz", "/healthz"):
            assert c.get(path).status_code == 403, path
        assert c.get("/accounts/login/").status_code == 200
