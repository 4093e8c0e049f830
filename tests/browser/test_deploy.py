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

import datetime
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import time

import pytest
import websockets
from playwright.sync_api import expect

from tests.browser.helpers import Wire, assert_shows_log, settle
from tests.harness import ROOT, Process, server_env

pytestmark = pytest.mark.postgres

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
RECIPE = ROOT / "deploy" / "nginx" / "agent-sessions.conf"
READ_TIMEOUT = 12  # s: the client pings after 10 s of silence

MAIN_CONF = """
{user}
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log info;
events {{ worker_connections 1024; }}
http {{
    include /etc/nginx/mime.types;
    access_log {tmp}/access.log;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    include {tmp}/agent-sessions.conf;
}}
"""


class Proxied:
    """The site as its users reach it: https through nginx."""

    def __init__(self, port: int):
        self.port = port
        self.http = f"https://localhost:{port}"
        self.ws = f"wss://localhost:{port}/ws/sessions/"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _certificate(tmp) -> tuple[str, str]:
    """A self-signed certificate for localhost, made for this test."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp / "site.crt", tmp / "site.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return str(cert_path), str(key_path)


@pytest.fixture
def deployment(daphnes, tmp_path):
    """nginx (TLS) in front of two daphnes, as docs/deploy.md sets them up."""
    yield from _deploy(daphnes, tmp_path)


def _deploy(daphnes, tmp_path, **extra_env):
    if NGINX is None:
        pytest.skip(
            "NGINX IS NOT INSTALLED: the deployment recipe is not tested (apt install nginx-light)"
        )
    port = _free_port()
    env = {
        "HTTPS": "1",
        "TRUST_X_FORWARDED_PROTO": "1",
        "SERVE_STATIC": "0",
        # localhost through nginx; 127.0.0.1 for the probes asked directly.
        "ALLOWED_HOSTS": "localhost,127.0.0.1",
        # nginx sets X-Forwarded-For to the client's address: trust that one.
        "NUM_PROXIES": "1",
        **extra_env,
    }
    one, two = daphnes(**env), daphnes(**env)
    static_root = tmp_path / "var" / "staticfiles"
    collected = subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput", "-v", "0"],
        cwd=ROOT,
        env=server_env(AGENT_VAR_DIR=str(tmp_path / "var")),
        capture_output=True,
        text=True,
    )
    assert collected.returncode == 0, collected.stderr
    cert, key = _certificate(tmp_path)
    site = RECIPE.read_text()
    for word, value in {
        "SERVER_NAME": "localhost",
        "LISTEN_PORT": str(port),
        "CERTIFICATE_KEY": key,
        "CERTIFICATE": cert,
        "STATIC_ROOT": str(static_root),
        "DAPHNE_1": f"127.0.0.1:{one.port}",
        "DAPHNE_2": f"127.0.0.1:{two.port}",
        "OPERATOR_NETWORK": "127.0.0.1",
    }.items():
        site = re.sub(rf"\b{word}\b", value, site)
    assert "proxy_read_timeout 75s;" in site
    site = site.replace("proxy_read_timeout 75s;", f"proxy_read_timeout {READ_TIMEOUT}s;")
    (tmp_path / "agent-sessions.conf").write_text(site)
    user = "user root;" if os.geteuid() == 0 else ""
    (tmp_path / "nginx.conf").write_text(MAIN_CONF.format(tmp=tmp_path, user=user))
    nginx = Process(
        [NGINX, "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf"), "-g", "daemon off;"],
        os.environ.copy(),
        "nginx",
        tmp_path,
    ).start()
    deadline = datetime.datetime.now() + datetime.timedelta(seconds=10)
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert datetime.datetime.now() < deadline, nginx.log_text()
            assert nginx.proc.poll() is None, nginx.log_text()
    yield Proxied(port), (one, two)
    nginx.stop()


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
    css = page.request.get(site.http + "/static/css/app.css")
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
    yield from _deploy(daphnes, tmp_path, AGENT_PUBLIC_API_DOCS="1", AGENT_API_RATE="3/minute")


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
        static = c.get("/static/css/app.css")
    assert codes == [200, 200, 200, 429, 429, 429], codes
    assert static.headers["x-content-type-options"] == "nosniff"
    assert static.headers["strict-transport-security"].startswith("max-age=")
    outside = httpx.HTTPTransport(local_address="127.0.0.2", verify=False)
    with httpx.Client(base_url=site.http, transport=outside, timeout=30) as c:
        for path in ("/admin/", "/metrics", "/metrics/database", "/readyz", "/healthz"):
            assert c.get(path).status_code == 403, path
        assert c.get("/accounts/login/").status_code == 200
