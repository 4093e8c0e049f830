"""The deployment recipe's nginx, run for a test (docs/deploy.md): its
configuration exactly deploy/nginx/agent-sessions.conf with the placeholders
filled in, and nginx's own size exactly as docs/deploy.md writes it; in front
of two daphnes of the ``daphnes`` fixture."""

from __future__ import annotations

import datetime
import os
import re
import shutil
import socket
import subprocess
import sys

import pytest

from tests.harness import ROOT, Process, server_env
from tests.support.waiting import wait_for

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
RECIPE = ROOT / "deploy" / "nginx" / "agent-sessions.conf"
READ_TIMEOUT = 12  # s: the client pings after 10 s of silence


def _sizing() -> str:
    """nginx's own size as docs/deploy.md writes it (worker_processes,
    worker_rlimit_nofile, worker_connections), taken from its text."""
    text = (ROOT / "docs" / "deploy.md").read_text()
    block = text.split("nginx's own size", 1)[1].split("```nginx\n", 1)[1].split("```", 1)[0]
    assert "worker_connections" in block and "worker_rlimit_nofile" in block
    return block.replace("{", "{{").replace("}", "}}")


MAIN_CONF = (
    """
{user}
pid {tmp}/nginx.pid;
error_log {tmp}/error.log info;
"""
    + _sizing()
    + """
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
)


class Proxied:
    """The site as its users reach it: https through nginx."""

    def __init__(self, port: int, tmp):
        self.port = port
        self.tmp = tmp  # nginx's prefix: its error.log
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


def deploy(daphnes, tmp_path, **extra_env):
    """nginx (TLS) in front of two daphnes started with ``extra_env``, as
    docs/deploy.md sets them up: yields the site and the daphnes."""
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
    try:
        wait_for(lambda: _listening(port) or nginx.proc.poll() is not None, timeout=10)
        assert nginx.proc.poll() is None, nginx.log_text()
        yield Proxied(port, tmp_path), (one, two)
    finally:
        nginx.stop()


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True
