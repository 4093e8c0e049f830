"""server/security.py: the upgrade's Origin and Host, by Django's own host rules."""

from __future__ import annotations

import logging

import pytest

from sessions_app.server.security import SameOriginValidator, origin_allowed, refusal


def _scope(origin: str | None, host: str | None) -> dict:
    headers = []
    if origin is not None:
        headers.append((b"origin", origin.encode()))
    if host is not None:
        headers.append((b"host", host.encode()))
    return {"type": "websocket", "scheme": "ws", "path": "/ws/sessions/", "headers": headers}


def test_debug_with_no_allowed_hosts_allows_the_local_names(settings):
    """As Django's own pages under startproject's defaults (DEBUG, no
    ALLOWED_HOSTS): localhost and 127.0.0.1 are allowed, others are not."""
    settings.DEBUG, settings.ALLOWED_HOSTS = True, []
    assert origin_allowed(_scope("http://localhost:8000", "localhost:8000"))
    assert origin_allowed(_scope("http://127.0.0.1:8000", "127.0.0.1:8000"))
    assert not origin_allowed(_scope("http://example.com", "example.com"))
    settings.DEBUG = False
    assert not origin_allowed(_scope("http://localhost:8000", "localhost:8000"))


def test_each_refusal_says_why(settings):
    """The reasons a refused upgrade is logged with."""
    settings.DEBUG, settings.ALLOWED_HOSTS = False, ["site.example"]
    assert refusal(_scope(None, "site.example")) == "no Origin header"
    assert "not in ALLOWED_HOSTS" in refusal(_scope("http://x.example", "x.example"))
    assert "not this site's" in refusal(_scope("http://evil.example", "site.example"))
    assert refusal(_scope("http://site.example", "site.example")) is None


@pytest.mark.asyncio
@pytest.mark.django_db
async def test_a_refused_upgrade_is_logged_with_its_reason(settings, caplog):
    """The middleware logs the refusal and its reason (daphne says only WSREJECT)."""
    settings.DEBUG, settings.ALLOWED_HOSTS = False, []
    sent = []
    inbox = [{"type": "websocket.connect"}, {"type": "websocket.disconnect", "code": 1006}]

    async def receive():
        return inbox.pop(0)

    async def send(message):
        sent.append(message)

    async def app(scope, receive, send):  # never reached
        raise AssertionError

    with caplog.at_level(logging.WARNING, logger="sessions_app.server.security"):
        await SameOriginValidator(app)(_scope("http://localhost", "localhost"), receive, send)
    assert "refused a WebSocket upgrade to '/ws/sessions/': Host 'localhost'" in caplog.text
    assert sent and sent[0]["type"] == "websocket.close"
