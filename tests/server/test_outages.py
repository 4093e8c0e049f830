"""The middleware the app installs (sessions_app/server/outages.py, security.py)
is async-capable: under daphne a request takes no thread for it, so a client
that leaves at once holds neither a thread nor a database connection, and
nothing is logged as an error."""

from __future__ import annotations

import pytest
from django.conf import settings

from tests.harness import Daphne, named_connections
from tests.raw_http import ask_and_leave
from tests.support.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


# The server's connections say so (libpq's PGAPPNAME): the shared servers of
# the suite use the same database, and their count moves on its own.
APP_NAME = "agent-test-quick-closes"


def _connections() -> int:
    return named_connections(APP_NAME)


def test_the_apps_middleware_is_async_capable():
    """Each middleware the app ships says it can run async and sync."""
    from sessions_app.server.outages import UnavailableMiddleware
    from sessions_app.server.security import ContentSecurityPolicyMiddleware

    for middleware in (UnavailableMiddleware, ContentSecurityPolicyMiddleware):
        assert middleware.async_capable and middleware.sync_capable


def test_the_503_is_not_logged_again_by_django(caplog, rf):
    """The outage's 503 is logged once for many by the middleware; Django's
    own response log (``django.request``, a line a request: 176 lines in a
    5 s drill) writes nothing for it."""
    import logging

    from django.db import OperationalError
    from django.utils.log import log_response

    from sessions_app.server.outages import unavailable

    request = rf.get("/api/sessions/")
    response = unavailable(request, OperationalError("gone"))
    with caplog.at_level(logging.ERROR, "django.request"):
        log_response("Service Unavailable: %s", request.path, response=response, request=request)
    assert response.status_code == 503
    assert [r for r in caplog.records if r.name == "django.request"] == []


def test_quick_closes_keep_no_connection_and_log_no_error(user, cookie, tmp_path):
    """200 clients that ask for a page and leave at once: afterwards the
    server holds no more database connections than before (PostgreSQL's own
    count), and its log has no CancelledError or traceback."""
    if settings.AGENT_RUNNER != "worker":
        pytest.skip("PostgreSQL's connections are the production profile's")
    daphne = Daphne(tmp_path, PGAPPNAME=APP_NAME).start()
    try:
        for _ in range(3):
            ask_and_leave(daphne.port, "/", cookie)  # the server's own connections, opened
        before = wait_for(lambda: _settled(daphne))
        for _ in range(200):
            ask_and_leave(daphne.port, "/", cookie)
        after = wait_for(lambda: _settled(daphne))
        assert after <= before + 1, (before, after)
        logged = daphne.log_text()
        assert "CancelledError" not in logged and "Traceback" not in logged
    finally:
        daphne.stop()


def _settled(daphne) -> int | None:
    """The count of connections, once two reads a moment apart agree."""
    import time

    first = _connections()
    time.sleep(0.5)  # sleep-ok: two reads of a count, apart, to see it settled
    second = _connections()
    return second if first == second else None
