"""server/probe_routes.py: the runbook's probes answer whatever the Host."""

from __future__ import annotations

import pytest

from tests.support.clients import http_get

pytestmark = pytest.mark.django_db(transaction=True)


def _get(server, path: str, host: str, method: str = "GET") -> tuple[int, str]:
    return http_get(f"{server.http}{path}", host=host, method=method)


def test_probes_answer_a_host_not_in_allowed_hosts(server):
    """curl http://127.0.0.1:8001/readyz as the runbook writes it: the probes
    answer even when the Host is not an allowed one; a page does not."""
    other = "10.9.8.7:8001"
    assert _get(server, "/healthz", other) == (200, "ok")
    assert _get(server, "/readyz", other) == (200, "ready")
    assert _get(server, "/readyz", other, "HEAD") == (200, "")
    assert _get(server, "/accounts/login/", other)[0] == 400


def test_metrics_scrape_a_daphnes_own_port_with_the_token(tmp_path):
    """A scraper with AGENT_METRICS_TOKEN reads /metrics and /metrics/database
    on a daphne's own port whatever the Host, and with HTTPS on (the runbook's
    env) gets no redirect; without the token it goes on to Django, which
    gives nothing away."""
    from tests.harness import Daphne

    daphne = Daphne(tmp_path, AGENT_METRICS_TOKEN="scrape-me", HTTPS="1").start()
    try:
        other = "127.0.0.1:8001"

        def scrape(path: str, token: str | None) -> tuple[int, str]:
            return http_get(f"http://127.0.0.1:{daphne.port}{path}", token, host=other)

        status, text = scrape("/metrics", "scrape-me")
        assert status == 200 and "agent_sockets_open" in text
        status, text = scrape("/metrics/database", "scrape-me")
        assert status == 200 and "agent_gates_waiting" in text
        for token in ("wrong", None):
            status, text = scrape("/metrics", token)
            assert status in (301, 400, 404) and "agent_" not in text
    finally:
        daphne.stop()
