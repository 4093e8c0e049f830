"""The socket database pool (``sessions_app.socket_db``): persistent connections
that are not health-checked before every call, yet never reused once broken.

The pooled functions are called here on the test's own thread (``.func``), so
every call uses one and the same connection, as on one pool thread."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection, connections

from sessions_app import socket_db
from sessions_app.models import AgentSession

pytestmark = pytest.mark.django_db(transaction=True)


def _count(break_it: bool = False) -> int:
    if break_it:
        connection.ensure_connection()
        connection.connection.close()  # as a database restart leaves it
    return AgentSession.objects.count()


count = socket_db._in_db_pool(_count).func


@pytest.mark.skipif(
    connection.vendor != "postgresql",
    reason="only a database server drops connections (SQLite's are in-process)",
)
def test_a_broken_connection_fails_one_call_and_the_next_reconnects(monkeypatch):
    """A call on a connection the database dropped fails; the next call, even
    within the check interval, gets a fresh connection."""
    monkeypatch.setattr(socket_db, "CHECK_SECONDS", 3600.0)
    assert count() == 0
    with pytest.raises(DatabaseError):
        count(break_it=True)
    assert count() == 0


def test_calls_within_the_interval_are_not_health_checked_again(monkeypatch):
    """Between checks a call reuses the connection without Django's SELECT 1;
    once the interval has passed the next call checks it again."""
    monkeypatch.setattr(socket_db, "CHECK_SECONDS", 3600.0)
    count()
    checks = []
    monkeypatch.setattr(
        connections["default"], "is_usable", lambda: checks.append(1) or True, raising=True
    )
    count()
    count()
    assert checks == []
    monkeypatch.setattr(socket_db, "CHECK_SECONDS", 0.0)
    count()
    count()
    assert len(checks) == 2
