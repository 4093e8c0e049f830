"""server/probe_routes.py: the runbook's probes answer whatever the Host."""

from __future__ import annotations

import http.client

import pytest

pytestmark = pytest.mark.django_db(transaction=True)


def _get(server, path: str, host: str, method: str = "GET") -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request(method, path, headers={"Host": host})
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def test_probes_answer_a_host_not_in_allowed_hosts(server):
    """curl http://127.0.0.1:8001/readyz as the runbook writes it: the probes
    answer even when the Host is not an allowed one; a page does not."""
    other = "10.9.8.7:8001"
    assert _get(server, "/healthz", other) == (200, "ok")
    assert _get(server, "/readyz", other) == (200, "ready")
    assert _get(server, "/readyz", other, "HEAD") == (200, "")
    assert _get(server, "/accounts/login/", other)[0] == 400
