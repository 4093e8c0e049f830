"""``sessions_app.db_pool``: the sockets' database calls skip the health check of
a connection used a moment ago, and keep it for an idle or failed one."""

from __future__ import annotations

import pytest
from django.db import connection, connections
from django.db.utils import DatabaseError

from sessions_app import db_pool

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def checks(monkeypatch):
    """Counts the health checks (``is_usable``) of every thread's connection."""
    calls = []
    wrapper = type(connections["default"])
    real = wrapper.is_usable

    def counted(self):
        calls.append(self.alias)
        return real(self)

    monkeypatch.setattr(wrapper, "is_usable", counted)
    return calls


def _query():
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        return cursor.fetchone()[0]


def _fail():
    with connection.cursor() as cursor:
        cursor.execute("SELECT no_such_column FROM no_such_table")


@pytest.fixture
def on_one_thread():
    """``in_db_pool`` on a pool of one thread (the loop's would spread the calls)."""
    from concurrent.futures import ThreadPoolExecutor

    executor = ThreadPoolExecutor(max_workers=1)
    yield lambda func: db_pool.in_db_pool(func, executor)
    executor.submit(connections.close_all).result()
    executor.shutdown()


async def test_calls_a_moment_apart_check_the_connection_once(checks, on_one_thread):
    """Back-to-back calls on one thread: the first checks its connection, the
    next ones (within HEALTHY_SECONDS) do not: one round trip less each."""
    call = on_one_thread(_query)
    for _ in range(5):
        assert await call() == 1
    assert len(checks) <= 1


async def test_a_connection_idle_longer_is_checked_every_time(checks, on_one_thread, monkeypatch):
    """Past HEALTHY_SECONDS since the thread's last call, the check runs as
    Django's CONN_HEALTH_CHECKS does."""
    monkeypatch.setattr(db_pool, "HEALTHY_SECONDS", 0.0)
    call = on_one_thread(_query)
    await call()
    before = len(checks)
    for _ in range(3):
        await call()
    assert len(checks) - before == 3


async def test_after_a_database_error_the_connection_is_checked(checks, on_one_thread):
    """A call that raised a database error leaves its connection suspect: it is
    checked before the thread's next query, and that query works."""
    call, fail = on_one_thread(_query), on_one_thread(_fail)
    await call()
    before = len(checks)
    with pytest.raises(DatabaseError):
        await fail()
    assert len(checks) > before
    assert await call() == 1
