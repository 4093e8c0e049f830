"""metrics.py: /metrics moves with what the server does and is for staff or the
scraper's token only; /readyz checks the database and the channel layer."""

from __future__ import annotations

import asyncio
import re

import pytest
from django.conf import settings as django_settings
from django.test import Client

from tests.harness import WsClient, session_cookie
from tests.support.clients import http_get

pytestmark = pytest.mark.django_db(transaction=True)


def _scrape(server, cookie: str, path: str = "/metrics") -> dict[str, float]:
    status, text = http_get(f"{server.http}{path}", cookie=cookie)
    assert status == 200, text
    samples = {}
    for line in text.splitlines():
        m = re.match(r"^([a-z_]+(?:\{[^}]*\})?) ([0-9.e+-]+)$", line)
        if m:
            samples[m.group(1)] = float(m.group(2))
    return samples


def _get(name: str, samples: dict[str, float]) -> float:
    return samples.get(name, 0.0)


async def test_metrics_move_with_a_session_a_resume_and_a_rejection(
    server, cookie, user, django_user_model
):
    """After a start, a send, a resume and a not_found rejection on the live server,
    its counters show each of them; runs and gates come from the database."""
    staff = await asyncio.to_thread(
        django_user_model.objects.create_user, "ops", password="ops-pass-1", is_staff=True
    )
    staff_cookie = await asyncio.to_thread(session_cookie, staff)
    before = await asyncio.to_thread(_scrape, server, staff_cookie)
    a = await WsClient.connect(server.ws, cookie)
    ok = await a.start()
    sent = await a.request({"type": "send", "client_message_id": "m1", "text": "/stream 3 0"})
    assert sent["type"] == "send_ok"
    await a.wait_event(lambda f: f["kind"] == "run.finished")
    b = await WsClient.connect(server.ws, cookie)
    assert (await b.resume(ok["session_id"], 0))["type"] == "resume_ok"
    await b.wait(lambda f: f.get("type") == "presence")
    c = await WsClient.connect(server.ws, cookie)
    assert (await c.resume("s_nope", 0))["reason"] == "not_found"
    after = await asyncio.to_thread(_scrape, server, staff_cookie)

    def moved(name: str) -> float:
        return _get(name, after) - _get(name, before)

    assert moved('agent_handshakes_total{outcome="ok",type="start"}') == 1
    assert moved('agent_handshakes_total{outcome="ok",type="resume"}') == 1
    assert moved('agent_handshakes_total{outcome="not_found",type="resume"}') == 1
    assert _get("agent_sockets_open", after) >= 3
    assert moved("agent_replay_seconds_count") >= 2 and moved("agent_replay_events_sum") >= 1
    assert moved("agent_publish_lag_seconds_count") >= 1
    # The database-wide gauges are on their own path, not repeated per process.
    assert not [k for k in after if k.startswith(("agent_runs{", "agent_gates_waiting"))]
    database = await asyncio.to_thread(_scrape, server, staff_cookie, "/metrics/database")
    assert 'agent_runs{status="finished"}' in database and "agent_gates_waiting" in database
    if django_settings.AGENT_RUNNER == "embedded":  # runs append in the server process
        assert moved("agent_append_seconds_count") >= 1
    for s in (a, b, c):
        await s.close()


@pytest.mark.parametrize("path", ["/metrics", "/metrics/database"])
def test_metrics_are_for_staff_or_the_scrapers_token(user, django_user_model, settings, path):
    """Anonymous and ordinary users get 404; staff and the bearer token get the
    text, of this process and of the database alike."""
    anonymous = Client()
    assert anonymous.get(path).status_code == 404
    ordinary = Client()
    ordinary.force_login(user)
    assert ordinary.get(path).status_code == 404
    staff = Client()
    staff.force_login(django_user_model.objects.create_user("ops", is_staff=True))
    shown = staff.get(path).content
    assert (b"agent_sockets_open" in shown) == (path == "/metrics")
    assert (b"agent_gates_waiting" in shown) == (path == "/metrics/database")
    settings.AGENT_METRICS_TOKEN = "s3cret"
    assert anonymous.get(path, HTTP_AUTHORIZATION="Bearer s3cret").status_code == 200
    assert anonymous.get(path, HTTP_AUTHORIZATION="Bearer nope").status_code == 404


def test_readyz_checks_the_database_and_the_layer(server):
    """The live server is ready: its database and channel layer answer."""
    assert http_get(f"{server.http}/readyz") == (200, "ready")


def test_readyz_says_what_failed(monkeypatch):
    """A failing database makes /readyz 503, naming the component only: no
    exception class or message reaches an anonymous caller."""
    from sessions_app.server import metrics

    def broken():
        raise ConnectionError("down")

    monkeypatch.setattr(metrics, "database_works", broken)
    r = Client().get("/readyz")
    assert r.status_code == 503 and r.content == b"not ready: database"
