"""A run worker's own HTTP port (sessions_app/server/probes.py), in process."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from sessions_app.server import probes
from tests.support.clients import http_get

pytestmark = pytest.mark.django_db(transaction=True)


def _get(port: int, path: str, token: str | None = None) -> tuple[int, str]:
    return http_get(f"http://127.0.0.1:{port}{path}", token)


def test_health_readiness_and_metrics_behind_the_token(settings):
    """/healthz follows the worker's loop, /readyz the database, /metrics the
    token; anything else is 404."""
    settings.AGENT_METRICS_TOKEN = "t0ken"
    running = [True]
    server = probes.serve("127.0.0.1", 0, alive=lambda: running[0])
    port = server.server_address[1]
    try:
        assert _get(port, "/healthz") == (200, "ok")
        assert _get(port, "/readyz") == (200, "ready")
        assert _get(port, "/metrics")[0] == 404
        assert _get(port, "/metrics", "wrong")[0] == 404
        status, text = _get(port, "/metrics", "t0ken")
        assert status == 200 and "agent_append_seconds" in text
        assert _get(port, "/other")[0] == 404
        running[0] = False
        assert _get(port, "/healthz") == (503, "stopped")
    finally:
        server.shutdown()


def test_a_public_host_needs_the_token(settings):
    """Serving on anything but loopback without AGENT_METRICS_TOKEN is refused
    at start-up, naming the fix."""
    settings.AGENT_METRICS_TOKEN = ""
    with pytest.raises(ImproperlyConfigured, match="AGENT_METRICS_TOKEN"):
        probes.serve("0.0.0.0", 0, alive=lambda: True)  # noqa: S104 (the point)
